#!/usr/bin/env bash
# features_gpu.sh: issue 14's score modifiers (softcap, ALiBi, sinks) on the H200 in one device
# call, from the repo root with the machine's installed torch (no network: expecttest from .whl/):
#   1. a narrow in-place build (bf16 + fp16, head dims 64, 128, 256 = every tile shape the tests
#      use; sm_90 SASS for the portable family plus the sm90 family, so the routing to sm80 is real)
#   2. tests/gpu/test_features_gpu.py (and test_kernels.py's sanitizer subset: the plain path)
#   3. compute-sanitizer memcheck on test_features_sanitizer_subset
#   4. the timing: softcap 50 at S 8k d128 against no softcap (and ALiBi, sinks), one process
# Prints a short table last; exits 1 if any step failed. Logs go to $OUT. Under 4 minutes.
#   bash scripts/dev/features_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"

narrow_build 150 "64;128;256"

tests "features tests" 150 tests.log $PY -m pytest tests/gpu/test_features_gpu.py \
  "tests/gpu/test_kernels.py::test_sanitizer_subset" -q -p no:cacheprovider -rs --durations=5
timed "sanitizer memcheck" 90 sanitize_memcheck.log compute-sanitizer --tool memcheck --error-exitcode 9 \
  --target-processes all $PY -m pytest tests/gpu/test_features_gpu.py -q -x -p no:cacheprovider -k sanitizer_subset
timed timing 60 timing.log $PY scripts/dev/features_timing.py
tail -25 "$OUT/tests.log"
cat "$OUT/timing.log"
finish
