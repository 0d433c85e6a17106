#!/usr/bin/env bash
# final_gpu.sh: a session's last device call after kernel fixes (session 11): narrow build (bf16 +
# fp16, d64 / d128, both families), the extreme suite on both families, the fuzz test, the
# backward kernel tests on both families, then the benchmark's model rows and the d64 / d128 sweep
# (2k, 8k; 2 rounds). Short table last; exits 1 if a step failed. Session 11: ~315 s in all, the
# models part cut at 110 s (3 rounds need ~130 s): its limit is now 200.
#   run(command="bash scripts/dev/final_gpu.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 120 "64;128"
tests "extreme" 60 extreme.log $PY -m pytest -q -p no:cacheprovider -n 8 tests/gpu/test_extreme.py
tests "extreme sm80" 60 extreme_sm80.log env FLASHSDPA_FAMILY=sm80 $PY -m pytest -q -p no:cacheprovider -n 8 tests/gpu/test_extreme.py
tests "fuzz" 60 fuzz.log $PY -m pytest -q -p no:cacheprovider tests/gpu/test_fuzz_gpu.py
tests "kernels bwd" 60 kbwd.log $PY -m pytest -q -p no:cacheprovider -n 8 tests/gpu/test_kernels.py -k "bwd or backward or grad"
tests "kernels bwd sm80" 60 kbwd_sm80.log env FLASHSDPA_FAMILY=sm80 $PY -m pytest -q -p no:cacheprovider -n 8 tests/gpu/test_kernels.py -k "bwd or backward or grad"
timed "bench models" 200 bench_models.log $PY -m flashsdpa bench --models --out "$OUT/bench_models"
timed "bench sweep" 130 bench_sweep.log $PY -m flashsdpa bench --sweep --direction both --head-dims 64 128 --seqlens 2k 8k \
  --rounds 2 --no-plot --no-memory --out "$OUT/bench_sweep"
grep -E "^E  .*(Assert|max)" "$OUT"/extreme*.log "$OUT"/fuzz.log | cut -c1-200 | head -8
echo "==== bench models"; tail -30 "$OUT/bench_models.log"
echo "==== bench sweep"; tail -40 "$OUT/bench_sweep.log"
finish
