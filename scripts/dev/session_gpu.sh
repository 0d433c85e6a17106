#!/usr/bin/env bash
# One device call: build (sm90 + portable, all dtypes and head dims), re-run the given GPU test
# subsets, then the benchmark parts asked for (each with its own time limit). Short table last.
#   TESTS="tests/gpu/test_kvcache.py ..." BENCH_ARGS="--sweep --direction both ..." bash scripts/dev/session_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
t0=$(date +%s)
FLASHSDPA_ARCHS=90 FLASHSDPA_BUILD_JOBS=$(nproc) FLASHSDPA_SKIP_INSTALL=0 bash scripts/bootstrap.sh > "$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
echo "build ok in $(( $(date +%s) - t0 )) s"
rc=0
if [[ -n "${TESTS:-}" ]]; then
  timeout "${TESTS_TIMEOUT:-150}" python3 -m pytest $TESTS -q -p no:cacheprovider ${PYTEST_X--x} -n 10 > "$OUT/tests.log" 2>&1; r=$?
  echo "tests rc=$r: $(grep -E '[0-9]+ (passed|failed)' "$OUT/tests.log" | tail -1)"; grep -E "^(FAILED|ERROR) " "$OUT/tests.log" | cut -c1-200 | head -40
  [[ $r == 0 ]] || rc=1
fi
if [[ -n "${FAMILY_TESTS:-}" ]]; then
  FLASHSDPA_FAMILY=sm80 timeout "${FAMILY_TIMEOUT:-120}" python3 -m pytest $FAMILY_TESTS -q -p no:cacheprovider -n 10 > "$OUT/tests_sm80.log" 2>&1; r=$?
  echo "sm80-forced rc=$r: $(grep -E '[0-9]+ (passed|failed)' "$OUT/tests_sm80.log" | tail -1)"
  grep -E "^(FAILED|ERROR) " "$OUT/tests_sm80.log" | cut -c1-200 | head -20
  [[ $r == 0 ]] || rc=1
fi
# SANITIZE_TESTS: the files whose sanitizer_subset tests run (default: the forward / backward ones;
# tests/gpu/test_kvcache.py for the decode path).
if [[ "${SANITIZE:-0}" == 1 ]]; then  # our kernels' small subsets, the caching allocator off (gpu_check.sh)
  for tool in memcheck racecheck; do
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "${SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool $tool --error-exitcode 9 --target-processes all \
      python3 -m pytest ${SANITIZE_TESTS:-tests/gpu/test_kernels.py tests/gpu/test_features_gpu.py tests/gpu/test_masks_gpu.py} -q -x -p no:cacheprovider \
      -k sanitizer_subset > "$OUT/sanitize_$tool.log" 2>&1; r=$?
    echo "sanitizer $tool rc=$r: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log" | tail -1)"
    [[ $r == 0 ]] || rc=1
  done
fi
if [[ "${TIMING:-0}" == 1 ]]; then
  timeout 60 python3 scripts/dev/features_timing.py > "$OUT/timing.log" 2>&1; echo "features timing rc=$?"
  tail -12 "$OUT/timing.log"
fi
for part in ${BENCH_PARTS:-}; do
  case $part in
    sweep) args="--sweep --direction both --head-dims 64 128 --seqlens 2k 8k --rounds 2 --no-plot --no-memory" ;;
    models) args="--models" ;;
    decode) args="--decode" ;;
    window) args="--window" ;;
    masks) args="--masks" ;;
  esac
  timeout "${BENCH_TIMEOUT:-150}" python3 -m flashsdpa bench $args --out "$OUT/bench_$part" > "$OUT/bench_$part.log" 2>&1
  echo "bench $part rc=$?"
done
for part in ${BENCH_PARTS:-}; do echo "==== bench $part"; tail -"${BENCH_TAIL:-45}" "$OUT/bench_$part.log"; done
exit $rc
