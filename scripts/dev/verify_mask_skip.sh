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

t0=$(date +%s)
FLASHSDPA_BUILD_DIR=/tmp/mask_skip_build FLASHSDPA_DTYPES="bf16;fp16" FLASHSDPA_HEAD_DIMS="64;128;256" \
  FLASHSDPA_ARCHS=90 FLASHSDPA_BUILD_JOBS="$(nproc)" FLASHSDPA_PTXAS_VERBOSE=1 \
  timeout 180 $PY setup.py build_ext --inplace > "$OUT/build.log" 2>&1
rc=$?
if [[ $rc != 0 ]]; then
  tail -30 "$OUT/build.log"; step build "FAILED rc=$rc (build.log)"; failed+=(build); finish
fi
step build "ok in $(( $(date +%s) - t0 )) s; spill warnings: $(grep -c 'bytes spill stores' "$OUT/build.log")"
grep -E "spill stores" "$OUT/build.log" | sed -E 's/.*function .(_Z[^ ]*). ([0-9]+ bytes spill stores.*)/\2 \1/' \
  | sort -u | cut -c1-200 > "$OUT/spills.txt"

MASK_TESTS="tests/gpu/test_mask_skip_gpu.py tests/gpu/test_masks_gpu.py"
# pytest NAME LIMIT LOG ARGS...: one test step (xdist over 10 workers), its row and its verdict.
run_tests() {
  local name=$1 limit=$2 log=$3; shift 3
  local t=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$log" 2>&1
  local r=$?
  step "$name" "rc=$r $(grep -E '[0-9]+ (passed|failed|error)' "$OUT/$log" | tail -1) ($(( $(date +%s) - t )) s)"
  check "$name" "$r"
  grep -qE '[0-9]+ passed' "$OUT/$log" || failed+=("$name (none passed)")
  grep -E "^(FAILED|ERROR) " "$OUT/$log" | cut -c1-180 | head -15
}
run_tests "mask + features tests" 120 tests.log \
  $PY -m pytest $MASK_TESTS tests/gpu/test_features_gpu.py -q -p no:cacheprovider -rs -n 10
run_tests "mask tests, sm80 forced" 75 tests_sm80.log \
  env FLASHSDPA_FAMILY=sm80 $PY -m pytest $MASK_TESTS -q -p no:cacheprovider -rs -n 10

t0=$(date +%s)
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 75 compute-sanitizer --tool memcheck --error-exitcode 9 --target-processes all \
  $PY -m pytest $MASK_TESTS -q -x -p no:cacheprovider -k sanitizer_subset > "$OUT/sanitize_memcheck.log" 2>&1
rc=$?
step "sanitizer memcheck" "rc=$rc $(grep -E 'ERROR SUMMARY' "$OUT/sanitize_memcheck.log" | tail -1) ($(( $(date +%s) - t0 )) s)"
check "sanitizer memcheck" "$rc"

t0=$(date +%s)
timeout 75 $PY -m flashsdpa bench --masks --out "$OUT/bench_masks" > "$OUT/bench_masks.log" 2>&1
rc=$?
step "bench --masks" "rc=$rc ($(( $(date +%s) - t0 )) s; bars below)"
check "bench --masks" "$rc"

t0=$(date +%s)
timeout 45 $PY scripts/dev/features_timing.py > "$OUT/timing.log" 2>&1
rc=$?
step "features timing" "rc=$rc ($(( $(date +%s) - t0 )) s; table below)"
check "features timing" "$rc"

echo "==== bench --masks"; tail -25 "$OUT/bench_masks.log"
echo "==== features_timing.py"; tail -14 "$OUT/timing.log"
finish
