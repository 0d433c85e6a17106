#!/usr/bin/env bash
# session25_final.sh (session 25, last call): is initcheck's report in our dQ postprocess (the
# dq_accum words only the TMA unit's bulk copies write) a blind spot of the tool? The probe
# (scripts/dev/initcheck_bulk_probe.cu) under initcheck, then initcheck on test_kernels' sanitizer
# subset on a bf16 + fp16 d32 / d64 / d128 build with a high print limit, our reports grouped by
# (kernel, source line) as gpu_check.sh now counts them.
#   run(command="bash scripts/dev/session25_final.sh", carry=[".whl"], timeout_s=480)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
compute-sanitizer --version | tail -1
compute-sanitizer --help 2>&1 | grep -i -E "bulk|tma|print-limit|initcheck" | head -20
nvcc -std=c++17 -arch=sm_90a -o /tmp/probe scripts/dev/initcheck_bulk_probe.cu && /tmp/probe
compute-sanitizer --tool initcheck /tmp/probe > "$OUT/probe_initcheck.log" 2>&1
step "bulk probe" "rc=$? reports: $(grep -c 'Uninitialized' "$OUT/probe_initcheck.log")"
grep -E "^---|Uninitialized|values|SUMMARY" "$OUT/probe_initcheck.log" | uniq -c | head -20
narrow_build 200 "32;64;128"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
t0=$(date +%s)
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 220 compute-sanitizer --tool initcheck --print-limit 20000 \
  --target-processes all $PY -m pytest tests/gpu/test_kernels.py -q -x -p no:cacheprovider -k sanitizer_subset \
  > "$OUT/sanitize_initcheck.log" 2>&1
rc=$?
awk '/^=+ [A-Z][a-z]+ .*(read|write|access)/ { if (frame != "") print frame; frame = ""; inrep = 1; next }
     inrep && frame == "" && /Device Frame: .*flashsdpa::/ { sub(/.*Device Frame: /, ""); frame = $0 }
     END { if (frame != "") print frame }' "$OUT/sanitize_initcheck.log" | sed -E 's/\+0x[0-9a-f]+//' \
  | sort | uniq -c | sort -rn > "$OUT/initcheck_ours.txt"
step "initcheck subset" "rc=$rc ($(( $(date +%s) - t0 )) s) ours: $(awk '{n+=$1} END {print n+0}' "$OUT/initcheck_ours.txt"), all: $(grep -c '^=* *Uninitialized' "$OUT/sanitize_initcheck.log"); $(grep -E '[0-9]+ (passed|failed)' "$OUT/sanitize_initcheck.log" | tail -1)"
cut -c1-200 "$OUT/initcheck_ours.txt" | head -20
grep -E "^=+ +Device Frame" "$OUT/sanitize_initcheck.log" | grep -v flashsdpa | sed -E 's/\+0x[0-9a-f]+//' | cut -c1-160 | sort | uniq -c | sort -rn | head -8
gzip -f "$OUT/sanitize_initcheck.log"
finish
