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

t0=$(date +%s)
FLASHSDPA_BUILD_DIR=/tmp/features_build FLASHSDPA_DTYPES="bf16;fp16" FLASHSDPA_HEAD_DIMS="64;128;256" \
  FLASHSDPA_ARCHS=90 FLASHSDPA_BUILD_JOBS="$(nproc)" FLASHSDPA_PTXAS_VERBOSE=1 \
  timeout 150 $PY setup.py build_ext --inplace > "$OUT/build.log" 2>&1
rc=$?
if [[ $rc != 0 ]]; then
  tail -30 "$OUT/build.log"; step build "FAILED rc=$rc (build.log)"; failed+=(build); finish
fi
step build "ok in $(( $(date +%s) - t0 )) s; spill warnings: $(grep -c 'bytes spill stores' "$OUT/build.log")"
grep -E "spill stores" "$OUT/build.log" | sed -E 's/.*function .(_Z[^ ]*). ([0-9]+ bytes spill stores.*)/\2 \1/' \
  | sort -u | cut -c1-200 > "$OUT/spills.txt"

t0=$(date +%s)
timeout 150 $PY -m pytest tests/gpu/test_features_gpu.py "tests/gpu/test_kernels.py::test_sanitizer_subset" \
  -q -p no:cacheprovider -rs --durations=5 2>&1 | tee "$OUT/tests.log" | tail -25
rc=${PIPESTATUS[0]}
step "features tests" "rc=$rc $(grep -E '(passed|failed|error)' "$OUT/tests.log" | tail -1) ($(( $(date +%s) - t0 )) s)"
check "features tests" "$rc"
grep -qE '[0-9]+ passed' "$OUT/tests.log" || failed+=("features tests (none passed)")

t0=$(date +%s)
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 --target-processes all \
  $PY -m pytest tests/gpu/test_features_gpu.py -q -x -p no:cacheprovider -k sanitizer_subset \
  > "$OUT/sanitize_memcheck.log" 2>&1
rc=$?
step "sanitizer memcheck" "rc=$rc $(grep -E 'ERROR SUMMARY' "$OUT/sanitize_memcheck.log" | tail -1) ($(( $(date +%s) - t0 )) s)"
check "sanitizer memcheck" "$rc"

t0=$(date +%s)
timeout 60 $PY scripts/dev/features_timing.py > "$OUT/timing.log" 2>&1
rc=$?
check timing "$rc"
step timing "rc=$rc ($(( $(date +%s) - t0 )) s; table below)"
cat "$OUT/timing.log"
finish
