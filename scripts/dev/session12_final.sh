#!/usr/bin/env bash
# session12_final.sh: session 12's last device call, after the staged-bias kernels (forward and
# backward) and the merges of the day: narrow build (bf16 + fp16, d64 / d128 / d256, both
# families), the whole GPU suite (head dims not built are skipped), the benchmark's model rows and a
# short d64 sweep (the d64 backward's step overlap). Short table last; exits 1 if a step failed
# (the extreme tie case and the fuzz case are known failures: issue 10).
#   run(command="bash scripts/dev/session12_final.sh", carry=[".whl"], timeout_s=480)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 120 "64;128;256"
tests "GPU suite" 190 suite.log $PY -m pytest -q -p no:cacheprovider -n 10 tests/gpu
timed "bench models" 150 bench_models.log $PY -m flashsdpa bench --models --out "$OUT/bench_models"
timed "bench sweep d64" 70 bench_sweep.log $PY -m flashsdpa bench --sweep --direction both --head-dims 64 \
  --seqlens 2k 8k --rounds 2 --no-plot --no-memory --out "$OUT/bench_sweep"
grep -E "^E  .*(Assert|max)" "$OUT"/suite.log | cut -c1-200 | head -8
echo "==== bench models"; tail -30 "$OUT/bench_models.log"
echo "==== bench sweep"; tail -24 "$OUT/bench_sweep.log"
finish
