#!/usr/bin/env bash
# verify_mask_skip.sh: issue 14's tile skipping (branch next/mask-skip) on the H200, in ONE device
# call under 8 minutes (limit the call to 600 s):
#   build (sm90 + portable, bf16 + fp16, all head dims: scripts/bootstrap.sh as session_gpu.sh runs it)
#   -> tests/gpu/test_mask_skip_gpu.py, test_masks_gpu.py, test_features_gpu.py (default families)
#   -> the mask files again with FLASHSDPA_FAMILY=sm80 (the portable family)
#   -> compute-sanitizer memcheck on the two mask files' sanitizer subsets
#   -> python -m flashsdpa bench --masks (issue 14's key-padding bars) and features_timing.py
# Exits non-zero when any step fails; a short table of the steps comes last.
#   bash scripts/dev/verify_mask_skip.sh        ($OUT: the device call's output folder)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
OUT=${OUT:-/tmp/verify_mask_skip}
mkdir -p "$OUT"
declare -a rows
rc=0
step() {  # step NAME LIMIT_S LOG CMD...: run, record "NAME rc seconds summary"
  local name=$1 limit=$2 log=$3; shift 3
  local t=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$log" 2>&1; local r=$?
  local summary
  summary=$(grep -E '[0-9]+ (passed|failed|error)|ERROR SUMMARY|PASS|FAIL' "$OUT/$log" | tail -1 | cut -c1-90)
  rows+=("$(printf '%-22s rc=%-3s %4ss  %s' "$name" "$r" "$(( $(date +%s) - t ))" "$summary")")
  [[ $r == 0 ]] || { rc=1; echo "---- $name failed (tail of $log)"; tail -25 "$OUT/$log"; }
  return $r
}
step build 180 build.log env FLASHSDPA_ARCHS=90 FLASHSDPA_BUILD_JOBS=$(nproc) FLASHSDPA_SKIP_INSTALL=0 \
  bash scripts/bootstrap.sh || { printf '%s\n' "${rows[@]}"; echo "BUILD FAILED"; exit 1; }
MASK_TESTS="tests/gpu/test_mask_skip_gpu.py tests/gpu/test_masks_gpu.py"
step tests 90 tests.log python3 -m pytest $MASK_TESTS tests/gpu/test_features_gpu.py -q -p no:cacheprovider -n 10
step tests-sm80 60 tests_sm80.log env FLASHSDPA_FAMILY=sm80 python3 -m pytest $MASK_TESTS -q -p no:cacheprovider -n 10
step memcheck 60 memcheck.log env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck \
  --error-exitcode 9 --target-processes all python3 -m pytest $MASK_TESTS -q -x -p no:cacheprovider -k sanitizer_subset
step bench-masks 75 bench_masks.log python3 -m flashsdpa bench --masks --out "$OUT/bench_masks"
step features-timing 45 timing.log python3 scripts/dev/features_timing.py
for log in tests tests_sm80; do grep -E "^(FAILED|ERROR) " "$OUT/$log.log" | cut -c1-160 | head -15; done
echo "==== bench --masks (bars last)"; tail -25 "$OUT/bench_masks.log"
echo "==== features_timing.py"; tail -12 "$OUT/timing.log"
echo "==== steps"
printf '%s\n' "${rows[@]}"
echo "verify_mask_skip: $([[ $rc == 0 ]] && echo PASS || echo FAIL)"
exit $rc
