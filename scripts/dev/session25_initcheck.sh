#!/usr/bin/env bash
# session25_initcheck.sh (session 25): initcheck with every report printed on test_kernels.py's
# sanitizer subset, then on test_kvcache.py's and test_features_gpu.py's, on a bf16 + fp16
# d32 / d64 / d128 build; our reports grouped by (kernel, source line), the TMA blind spot marked
# (device_env.sh's initcheck_ours).
#   run(command="bash scripts/dev/session25_initcheck.sh", carry=[".whl"], timeout_s=300)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
narrow_build 120 "32;64;128"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
run_initcheck() {  # NAME LIMIT TESTS...
  local name=$1 limit=$2 t0=$(date +%s); shift 2
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "$limit" compute-sanitizer --tool initcheck --print-limit 100000 \
    --target-processes all $PY -m pytest "$@" -q -p no:cacheprovider -k sanitizer_subset \
    > "$OUT/initcheck_$name.log" 2>&1
  local rc=$?
  initcheck_ours "$OUT/initcheck_$name.log" > "$OUT/initcheck_ours_$name.txt"
  local blind ours all
  blind=$(awk '/\[bulk-written\]$/ { n += $1 } END { print n + 0 }' "$OUT/initcheck_ours_$name.txt")
  ours=$(awk '!/\[bulk-written\]$/ { n += $1 } END { print n + 0 }' "$OUT/initcheck_ours_$name.txt")
  all=$(grep -c 'Uninitialized' "$OUT/initcheck_$name.log")
  step "initcheck $name" "rc=$rc ($(( $(date +%s) - t0 )) s) ours $ours (+$blind TMA-written), all $all; $(grep -E '[0-9]+ (passed|failed)' "$OUT/initcheck_$name.log" | tail -1 | cut -c1-60)"
  check "initcheck $name" "$rc"
  [[ "$ours" == 0 ]] || failed+=("initcheck $name: $ours reports in our kernels")
  cut -c1-200 "$OUT/initcheck_ours_$name.txt" | head -12
  grep -E "^=+ +(at|Device Frame:) " "$OUT/initcheck_$name.log" | grep -v flashsdpa | sed -E 's/\+0x[0-9a-f]+//' \
    | cut -c1-150 | sort | uniq -c | sort -rn | head -5
  gzip -f "$OUT/initcheck_$name.log"
}
run_initcheck kernels 120 tests/gpu/test_kernels.py
run_initcheck decode_features 100 tests/gpu/test_kvcache.py tests/gpu/test_features_gpu.py
finish
