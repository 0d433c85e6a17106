#!/usr/bin/env bash
# verify_features.sh: the second device call for next/features (masks' tile skipping, the bias's own
# instantiation, dropout), after the whole GPU suite ran in the first:
#   PYTEST_X= TESTS=tests/gpu TESTS_TIMEOUT=360 \
#     FAMILY_TESTS="tests/gpu/test_masks_gpu.py tests/gpu/test_mask_skip_gpu.py tests/gpu/test_dropout_gpu.py" \
#     bash scripts/dev/session_gpu.sh                                  (carry .whl)
# This one: a narrow in-place build (bf16 + fp16, head dims 64 / 128 / 256, sm_90: both families;
# ptxas spills into spills.txt), compute-sanitizer memcheck on the sanitizer subsets of the mask,
# skip and dropout tests, then the timings: `bench --masks` (issue 14's key-padding and bias bars),
# features_timing.py (softcap / ALiBi / sinks back on their pre-bias kernel) and dropout_timing.py
# (dropout 0.1, S 4k, d128 against PyTorch's flash and cuDNN). Short table last; exits 1 if a step
# failed. Step limits 180 + 150 + 75 + 45 + 60 = 510 s.
#   run(command="bash scripts/dev/verify_features.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"

narrow_build 180 "64;128;256"

timed "sanitizer memcheck" 150 sanitize_memcheck.log env PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
  compute-sanitizer --tool memcheck --error-exitcode 9 --target-processes all \
  $PY -m pytest tests/gpu/test_masks_gpu.py tests/gpu/test_mask_skip_gpu.py tests/gpu/test_dropout_gpu.py \
  -q -x -p no:cacheprovider -k sanitizer_subset
grep -q "ERROR SUMMARY: 0 errors" "$OUT/sanitize_memcheck.log" || failed+=("sanitizer (no clean summary)")
timed "bench --masks" 75 bench_masks.log $PY -m flashsdpa bench --masks --out "$OUT/bench_masks"
timed "features timing" 45 features_timing.log $PY scripts/dev/features_timing.py
timed "dropout timing" 60 dropout_timing.log $PY scripts/dev/dropout_timing.py

echo "==== bench --masks"; tail -25 "$OUT/bench_masks.log"
echo "==== features_timing.py"; tail -14 "$OUT/features_timing.log"
echo "==== dropout_timing.py"; tail -14 "$OUT/dropout_timing.log"
finish
