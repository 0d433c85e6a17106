#!/usr/bin/env bash
# session31_second.sh: where the d256 tile's time goes (its first run: 349.6 TFLOP/s at 8k, 0.98x
# cuDNN; causal 0.86x). Three builds of the d256 bucket: base, nored (no dQ reductions: timing only,
# dQ wrong) and earlydv (dV issued after a barrier on P^T alone), earlydv's gradients checked, 3
# alternating rounds of the whole backward at S 2k / 8k, then ncu (--set full) of base's main kernel
# at 8k with its stall samples per instruction.
# (Historical: the EARLY_DV, SPREAD and ROTATE switches it builds were removed at ec22d05, the
# losing variants; rerun it from e0f7aa5, where they exist. DQ_RED remains.)
#   run(command="bash scripts/dev/session31_second.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
# (each build in a tree of its own: build_copy builds in place, so two in one tree race for
# python/flashsdpa/_C*.so; this script's first run lost base and nored that way)
for name in nored earlydv; do rm -rf /tmp/tree_$name && cp -r "$PWD" /tmp/tree_$name && rm -rf /tmp/tree_$name/build; done
(cd /tmp/tree_nored && build_copy nored "256" CUDAFLAGS=-DFLASHSDPA_SM90_BWD256_DQ_RED=0) &
(cd /tmp/tree_earlydv && build_copy earlydv "256" CUDAFLAGS=-DFLASHSDPA_SM90_BWD256_EARLY_DV=1) &
build_copy base "256" CUDAFLAGS=
wait
for name in base nored earlydv; do
  ls /tmp/pkg_$name/python/flashsdpa/_C*.so >/dev/null 2>&1 || { tail -20 "$OUT/build_$name.log"; failed+=("build $name"); }
done
((${#failed[@]})) && finish
PYTHONPATH="/tmp/pkg_earlydv/python${SITE:+:$SITE}" tests "earlydv grads" 90 tests_earlydv.log \
  $PY -m pytest tests/gpu/test_kernels.py -q -p no:cacheprovider -n 8 -k "bwd256_gradients and bf16"
ab_rounds "base nored earlydv" 60 --dims 256 --seqlens 2048 8192
export PYTHONPATH="/tmp/pkg_base/python${SITE:+:$SITE}"
timed "ncu d256" 150 ncu_flashsdpa.log ncu --profile-from-start off --clock-control none --set full \
  --kernel-name regex:flashsdpa_bwd_sm90_kernel --launch-count 1 -f -o /tmp/ncu_flashsdpa \
  $PY scripts/dev/bwd_ncu.py --backend flashsdpa --head-dim 256
ncu --import /tmp/ncu_flashsdpa.ncu-rep --page details > "$OUT/ncu_flashsdpa_details.txt" 2>&1
ncu --import /tmp/ncu_flashsdpa.ncu-rep --page source --csv --print-source sass 2>&1 | gzip > "$OUT/ncu_flashsdpa_source.csv.gz"
$PY scripts/dev/ncu_source_top.py "$OUT/ncu_flashsdpa_source.csv.gz" --top 40 >> "$OUT/ncu_flashsdpa_details.txt" 2>&1
timed "ncu cudnn d256" 120 ncu_cudnn.log ncu --profile-from-start off --clock-control none --set full \
  --kernel-name regex:sdpa_sm90_flash_bprop --launch-count 1 -f -o /tmp/ncu_cudnn \
  $PY scripts/dev/bwd_ncu.py --backend cudnn --head-dim 256
ncu --import /tmp/ncu_cudnn.ncu-rep --page details > "$OUT/ncu_cudnn_details.txt" 2>&1
for b in flashsdpa cudnn; do echo "== $b"; grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Shared Memory|L1/TEX Hit|L2 Hit" \
  "$OUT/ncu_${b}_details.txt" | head -30; done
finish
