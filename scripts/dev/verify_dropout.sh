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

t0=$(date +%s)
FLASHSDPA_BUILD_DIR=/tmp/dropout_build FLASHSDPA_DTYPES="bf16;fp16" FLASHSDPA_HEAD_DIMS="64;128" \
  FLASHSDPA_ARCHS=90 FLASHSDPA_BUILD_JOBS="$(nproc)" FLASHSDPA_PTXAS_VERBOSE=1 \
  timeout 200 $PY setup.py build_ext --inplace > "$OUT/build.log" 2>&1
rc=$?
if [[ $rc != 0 ]]; then
  tail -30 "$OUT/build.log"; step build "FAILED rc=$rc (build.log)"; failed+=(build); finish
fi
step build "ok in $(( $(date +%s) - t0 )) s; spill warnings: $(grep -c 'bytes spill stores' "$OUT/build.log")"
grep -E "spill stores" "$OUT/build.log" | sed -E 's/.*function .(_Z[^ ]*). ([0-9]+ bytes spill stores.*)/\2 \1/' \
  | sort -u | cut -c1-220 > "$OUT/spills.txt"

t0=$(date +%s)
timeout 110 $PY -m pytest tests/gpu/test_dropout_gpu.py -q -p no:cacheprovider -rs --durations=5 2>&1 \
  | tee "$OUT/tests.log" | tail -25
rc=${PIPESTATUS[0]}
step "dropout tests" "rc=$rc $(grep -E '(passed|failed|error)' "$OUT/tests.log" | tail -1) ($(( $(date +%s) - t0 )) s)"
check "dropout tests" "$rc"
grep -qE '[0-9]+ passed' "$OUT/tests.log" || failed+=("dropout tests (none passed)")

t0=$(date +%s)
FLASHSDPA_FAMILY=sm80 timeout 70 $PY -m pytest tests/gpu/test_dropout_gpu.py -q -p no:cacheprovider \
  -k "mask_equals or forward_backward or backward_applies or capture or graph or direct_api" > "$OUT/tests_sm80.log" 2>&1
rc=$?
step "dropout tests, sm80 only" "rc=$rc $(grep -E '(passed|failed|error)' "$OUT/tests_sm80.log" | tail -1) ($(( $(date +%s) - t0 )) s)"
check "dropout tests, sm80 only" "$rc"
grep -E "^(FAILED|ERROR) " "$OUT/tests_sm80.log" | cut -c1-200 | head -10

t0=$(date +%s)
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 \
  --target-processes all $PY -m pytest tests/gpu/test_dropout_gpu.py -q -x -p no:cacheprovider \
  -k sanitizer_subset > "$OUT/sanitize_memcheck.log" 2>&1
rc=$?
step "sanitizer memcheck" "rc=$rc $(grep -E 'ERROR SUMMARY' "$OUT/sanitize_memcheck.log" | tail -1) ($(( $(date +%s) - t0 )) s)"
check "sanitizer memcheck" "$rc"

t0=$(date +%s)
timeout 60 $PY scripts/dev/dropout_timing.py > "$OUT/timing.log" 2>&1
rc=$?
check timing "$rc"
step timing "rc=$rc ($(( $(date +%s) - t0 )) s; table below)"
cat "$OUT/timing.log"
finish
