#!/usr/bin/env bash
# verify_mask_skip.sh: issue 14's tile skipping (branch next/mask-skip) and the bias's own kernel
# instantiation on the H200, in ONE device call (run it with timeout_s=600; the steps' caps sum to
# 570 s, ~5 minutes expected), from the repo root with the machine's torch (no network: .whl/):
#   1. a narrow in-place build (bf16 + fp16, head dims 64, 128, 256, sm_90: both families), as
#      features_gpu.sh builds; ptxas spill warnings counted into spills.txt
#   2. tests/gpu/test_mask_skip_gpu.py, test_masks_gpu.py, test_features_gpu.py (default families)
#   3. the two mask files again with FLASHSDPA_FAMILY=sm80 (the portable family)
#   4. compute-sanitizer memcheck on the mask files' sanitizer subsets
#   5. python -m flashsdpa bench --masks (issue 14's key-padding bars) and features_timing.py
#      (softcap / ALiBi / sinks back on their pre-bias kernel: against the table of session 9)
# Prints the bench's bars, the timing table and a table of the steps last; exits 1 if any step
# failed (a test step that passed nothing fails too). Logs go to $OUT.
#   run(command="bash scripts/dev/verify_mask_skip.sh", carry=[".whl"], timeout_s=600)   (.whl/: expecttest)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"

narrow_build 180 "64;128;256"

MASK_TESTS="tests/gpu/test_mask_skip_gpu.py tests/gpu/test_masks_gpu.py"
tests "mask + features tests" 120 tests.log \
  $PY -m pytest $MASK_TESTS tests/gpu/test_features_gpu.py -q -p no:cacheprovider -rs -n 10
tests "mask tests, sm80 forced" 75 tests_sm80.log \
  env FLASHSDPA_FAMILY=sm80 $PY -m pytest $MASK_TESTS -q -p no:cacheprovider -rs -n 10

timed "sanitizer memcheck" 75 sanitize_memcheck.log env PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
  compute-sanitizer --tool memcheck --error-exitcode 9 --target-processes all \
  $PY -m pytest $MASK_TESTS -q -x -p no:cacheprovider -k sanitizer_subset
timed "bench --masks" 75 bench_masks.log $PY -m flashsdpa bench --masks --out "$OUT/bench_masks"
timed "features timing" 45 timing.log $PY scripts/dev/features_timing.py

echo "==== bench --masks"; tail -25 "$OUT/bench_masks.log"
echo "==== features_timing.py"; tail -14 "$OUT/timing.log"
finish
