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

t0=$(date +%s)
FLASHSDPA_BUILD_DIR=/tmp/features_build FLASHSDPA_DTYPES="bf16;fp16" FLASHSDPA_HEAD_DIMS="64;128;256" \
  FLASHSDPA_ARCHS=90 FLASHSDPA_BUILD_JOBS="$(nproc)" FLASHSDPA_PTXAS_VERBOSE=1 \
  timeout 180 $PY setup.py build_ext --inplace > "$OUT/build.log" 2>&1
rc=$?
if [[ $rc != 0 ]]; then
  tail -30 "$OUT/build.log"; step build "FAILED rc=$rc (build.log)"; failed+=(build); finish
fi
step build "ok in $(( $(date +%s) - t0 )) s; spill warnings: $(grep -c 'bytes spill stores' "$OUT/build.log")"
grep -E "spill stores" "$OUT/build.log" | sed -E 's/.*function .(_Z[^ ]*). ([0-9]+ bytes spill stores.*)/\2 \1/' \
  | sort -u | cut -c1-220 > "$OUT/spills.txt"

# timed NAME LIMIT LOG CMD...: one step, its row and its verdict.
timed() {
  local name=$1 limit=$2 log=$3; shift 3
  local t=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$log" 2>&1
  local r=$?
  step "$name" "rc=$r ($(( $(date +%s) - t )) s) $(grep -E 'ERROR SUMMARY|[0-9]+ passed' "$OUT/$log" | tail -1 | cut -c1-80)"
  check "$name" "$r"
}
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
