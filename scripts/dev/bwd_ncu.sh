#!/usr/bin/env bash
# bwd_ncu.sh (session 17): Nsight Compute's full section set on the backward's main kernel, ours
# (flashsdpa_bwd_sm90_kernel) against cuDNN's (…sdpa_sm90_flash_bprop…), d128 S 8k dense, one
# launch each (~40 replay passes of a ~5 ms kernel), clocks left alone (--clock-control none, as
# the device notes ask). Each report's details page (speed of light, compute and memory workload,
# warp state, scheduler, instruction stats, occupancy) as text under $OUT; the source page (SASS
# with warp-stall samples per instruction, gzipped) and its top rows (scripts/dev/ncu_source_top.py).
# (Session 17 also exported the raw page; its numbers are in kernel_notes_bwd_sm90.md.)
# BIAS=1 SEQLEN=2048: the same on issue 14's bias row (an additive (1, H, S, S) mask with its
# gradient; ours is the kModsBias instantiation). Builds a narrow package first (bf16 d128):
# ARG1=nobuild skips building. HEAD_DIM=64: the d64 kernel (session 29's tall step) and cuDNN's.
#   run(command="bash scripts/dev/bwd_ncu.sh", carry=[".whl"], timeout_s=600)
#   run(command="HEAD_DIM=64 bash scripts/dev/bwd_ncu.sh", carry=[".whl"], timeout_s=600)
#   run(command="BIAS=1 SEQLEN=2048 bash scripts/dev/bwd_ncu.sh", carry=[".whl"], timeout_s=600)
#   (each with carry=[".whl", ".prebuilt"] after `BUILD_DTYPES="bf16;fp16" bash scripts/dev/prebuild.sh full "64;128;256"` here)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
# The build made on the dev machine and carried (scripts/dev/prebuild.sh full: bf16 + fp16 d64 / d128
# / d256) where there is one, else a narrow one here.
pkgname=ncu
if [[ -f .prebuilt/full/stamp ]]; then pkgname=full; fi
if [[ "${1:-}" != nobuild ]]; then
  if [[ $pkgname == full ]]; then BUILD_TIMEOUT=300 BUILD_DTYPES="bf16;fp16" build_copy full "64;128;256"; else build_copy ncu "${HEAD_DIM:-128}" CUDAFLAGS=; fi
fi
export PYTHONPATH="/tmp/pkg_$pkgname/python${PYTHONPATH:+:$PYTHONPATH}"
NCU=${NCU:-ncu}
for backend in flashsdpa cudnn; do
  case $backend in
    flashsdpa) kname='regex:flashsdpa_bwd_sm90_kernel' ;;
    cudnn) kname='regex:sdpa_sm90_flash_bprop' ;;
  esac
  timed "ncu $backend" 200 "ncu_$backend.log" $NCU --profile-from-start off --clock-control none --set full \
    --kernel-name "$kname" --launch-count 1 -f -o "/tmp/ncu_$backend" $PY scripts/dev/bwd_ncu.py --backend $backend \
    ${BIAS:+--bias} ${SEQLEN:+--seqlen $SEQLEN} --head-dim "${HEAD_DIM:-128}"
  tail -5 "$OUT/ncu_$backend.log"
  $NCU --import "/tmp/ncu_$backend.ncu-rep" --page details > "$OUT/ncu_${backend}_details.txt" 2>&1
  # The source page (SASS with each instruction's warp-stall samples), gzipped, and its top rows:
  # where the consumers wait (session 17's averages could not say).
  $NCU --import "/tmp/ncu_$backend.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip > "$OUT/ncu_${backend}_source.csv.gz"
  # (appended to the details: the device tool brings back at most ~8 files)
  $PY scripts/dev/ncu_source_top.py "$OUT/ncu_${backend}_source.csv.gz" --top 40 2>&1 | tee -a "$OUT/ncu_${backend}_details.txt" | head -70
  wc -l "$OUT/ncu_${backend}_details.txt"
done
# The side-by-side lines a reader wants first.
for backend in flashsdpa cudnn; do
  echo "== $backend"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Registers Per|Shared Memory Configuration Size|Issue Slots Busy|Executed Ipc Active|No Eligible|One or More Eligible|Warp Cycles Per Issued|Achieved Occupancy|Executed Instructions  " \
    "$OUT/ncu_${backend}_details.txt" | head -30
done
finish
