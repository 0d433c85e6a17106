#!/usr/bin/env bash
# models_rounds.sh (session 17): the bench's model rows alone, 3 interleaved rounds (the quick
# bench runs one), on a narrow build (bf16, d64 / d128: every attention call of the rows).
#   run(command="bash scripts/dev/models_rounds.sh", carry=[".whl"], timeout_s=300)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy models "64;128" CUDAFLAGS=
export PYTHONPATH="/tmp/pkg_models/python${PYTHONPATH:+:$PYTHONPATH}"
timed "bench --models" 200 models.log $PY -m flashsdpa bench --models --rounds "${ROUNDS:-3}" --out /tmp/models_out
sed -n '/^Models/,/^  (?/p' "$OUT/models.log"
grep -E "^  models" "$OUT/models.log"
finish
