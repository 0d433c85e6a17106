#!/usr/bin/env bash
# fwd_ncu.sh: Nsight Compute's full section set on our sm90 forward kernel and cuDNN's, one shape
# of the standard sweep (scripts/dev/fwd_profile.py; default D 128, S 8k, causal: issue 12's 650
# bar, 612-644 in session 17), clocks left alone. Each kernel's details page, its source page
# (SASS with warp-stall samples per instruction, gzipped) and scripts/dev/ncu_source_top.py's
# summary of it (appended to the details), then the side-by-side lines. Builds a narrow package
# first (bf16, the head dim) unless ARG1=nobuild. (Session 17 made it self-contained; session 8
# wrote it for a package build made elsewhere.)
#   run(command="D=128 S=8192 CAUSAL=1 bash scripts/dev/fwd_ncu.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
D=${D:-128} S=${S:-8192} CAUSAL=${CAUSAL:-1}
if [[ "${1:-}" != nobuild ]]; then build_copy fncu "$D" CUDAFLAGS=; fi
export PYTHONPATH="/tmp/pkg_fncu/python${PYTHONPATH:+:$PYTHONPATH}"
for who in flashsdpa cudnn; do
  case $who in
    flashsdpa) kname='regex:flashsdpa_fwd_sm90_kernel' ;;
    cudnn) kname='regex:sdpa_sm90_flash_fprop' ;;
  esac
  timed "ncu $who" 200 "ncu_fwd_$who.log" ncu --clock-control none --set full --kernel-name "$kname" \
    --launch-skip 1 --launch-count 1 -f -o "/tmp/ncu_fwd_$who" $PY scripts/dev/fwd_profile.py "$D" "$S" "$CAUSAL"
  ncu -i "/tmp/ncu_fwd_$who.ncu-rep" --page details > "$OUT/fwd_${who}_details.txt" 2>&1
  ncu -i "/tmp/ncu_fwd_$who.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip > "$OUT/fwd_${who}_source.csv.gz"
  $PY scripts/dev/ncu_source_top.py "$OUT/fwd_${who}_source.csv.gz" --top 40 2>&1 | tee -a "$OUT/fwd_${who}_details.txt" | head -60
done
for who in flashsdpa cudnn; do
  echo "== $who"
  grep -E "Duration|Compute \(SM\) Throughput|L2 Cache Throughput|Issue Slots Busy|Warp Cycles Per Issued|Executed Instructions  |Registers Per|Dynamic Shared Memory Per Block|Grid Size|Block Size" \
    "$OUT/fwd_${who}_details.txt" | head -14
done
finish
