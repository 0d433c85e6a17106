#!/usr/bin/env bash
# verify_dropout.sh: dropout (issue 14) on the H200 in one device call, from the repo root with the
# machine's installed torch (no network: expecttest from .whl/):
#   1. a narrow in-place build (bf16 + fp16, head dims 64 and 128: every shape the tests use; sm_90
#      SASS for the portable family plus the sm90 family, both of which have dropout in both
#      directions); ptxas -v kept in build.log
#   2. tests/gpu/test_dropout_gpu.py (the mask against PyTorch's flash kernel, fwd/bwd, the
#      backward's applied mask read back, deterministic mode, graphs, ...): as selected (the sm90
#      forward and backward, asserted), then with FLASHSDPA_FAMILY=sm80 (the portable family)
#   3. compute-sanitizer memcheck on test_dropout_sanitizer_subset
#   4. the timing: dropout 0.1, S 4k, d128, bf16 against PyTorch's flash and cuDNN, one process
# Prints a short table last; exits 1 if any step failed. Logs go to $OUT. About 6 minutes; the
# step limits (200 + 110 + 70 + 90 + 60 s) keep it under the device call's 10.
#   bash scripts/dev/verify_dropout.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"

narrow_build 200 "64;128"

tests "dropout tests" 110 tests.log $PY -m pytest tests/gpu/test_dropout_gpu.py -q -p no:cacheprovider -rs --durations=5
tests "dropout tests, sm80 only" 70 tests_sm80.log env FLASHSDPA_FAMILY=sm80 $PY -m pytest tests/gpu/test_dropout_gpu.py \
  -q -p no:cacheprovider -k "mask_equals or forward_backward or backward_applies or capture or graph or direct_api"
timed "sanitizer memcheck" 90 sanitize_memcheck.log env PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
  compute-sanitizer --tool memcheck --error-exitcode 9 --target-processes all \
  $PY -m pytest tests/gpu/test_dropout_gpu.py -q -x -p no:cacheprovider -k sanitizer_subset
timed timing 60 timing.log $PY scripts/dev/dropout_timing.py
tail -25 "$OUT/tests.log"
cat "$OUT/timing.log"
finish
