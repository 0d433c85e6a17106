#!/usr/bin/env bash
# session28_models.sh: after session 28's changes (decode variant 5, the entry's wide-head-dim test
# on every SDPA call): the bench's model rows (3 interleaved rounds), the shim's per-call overhead
# rows (shim_cost.py) and the decode rows with the paged bar (bench --decode).
#   run(command="bash scripts/dev/session28_models.sh", carry=[".whl"], timeout_s=480)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy models "64;128" CUDAFLAGS=
export PYTHONPATH="/tmp/pkg_models/python${PYTHONPATH:+:$PYTHONPATH}"
timed "bench --models" 200 models.log $PY -m flashsdpa bench --models --rounds 3 --out /tmp/models_out
timed "shim_cost" 100 shim.log $PY scripts/dev/shim_cost.py --rounds 5 --calls 500
timed "bench --decode" 90 decode.log $PY -m flashsdpa bench --decode --rounds 3 --out /tmp/decode_out
sed -n '/^Models/,/^  (?/p' "$OUT/models.log"
grep -E "^  models" "$OUT/models.log"
tail -12 "$OUT/shim.log"
grep -iE "paged|decode" "$OUT/decode.log" | tail -14
finish
