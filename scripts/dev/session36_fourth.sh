#!/usr/bin/env bash
# session36_fourth.sh: what the CTA pairs' exchange costs inside the head-dim-512 kernels, as an
# upper bound on any scheme that hides it. scripts/dev/ab/xchg_diag.patch (applied to copies of
# the tree) adds FLASHSDPA_SM90_XCHG_DIAG to PairExchange: 1 skips the exchange (each CTA keeps its
# own partial: wrong values, the same GEMMs, softmax and memory traffic), 2 sends into the CTA's
# own slot (the same instructions and bytes without the SM-to-SM network). Timing only: both give
# wrong answers by design. 2 alternating process rounds of hdim512_time.py, forward and backward,
# 2k and 8k, bf16, H 4.
# Prediction (H100): forward 8k without the exchange ~650-700 TFLOP/s against the tree's ~490 (the
# peer-wait is ~1/3 of the mainloop's stall samples); to its own slot ~the tree's (dsmem_bench.cu:
# the same ~20 B/clk either way); the backward without its two exchanges ~1.3x.
# Outcome (session 36, H100): forward 8k 1.53x without the exchange (~755 TFLOP/s), 2k 1.39x; own
# slot ~the tree's; backward 1.22x (kernel_notes_features.md, "Where the forward's time goes").
#   run(command="bash scripts/dev/session36_fourth.sh", carry=[".whl"], timeout_s=420)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
ROOT=$PWD
build_copy tree "512" CUDAFLAGS=
for d in 1 2; do
  rm -rf /tmp/tree_d$d && cp -r "$ROOT" /tmp/tree_d$d && rm -rf /tmp/tree_d$d/build
  (cd /tmp/tree_d$d && patch -p1 -s < "$ROOT/scripts/dev/ab/xchg_diag.patch" \
    && build_copy diag$d "512" CUDAFLAGS=-DFLASHSDPA_SM90_XCHG_DIAG=$d)
done
for name in tree diag1 diag2; do
  ls /tmp/pkg_$name/python/flashsdpa/_C*.so >/dev/null 2>&1 || failed+=("build $name")
done
((${#failed[@]})) && finish
for round in 1 2; do
  for name in tree diag1 diag2; do
    for dir in fwd bwd; do
      flag=""; [[ $dir == bwd ]] && flag="--bwd"
      PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "$name $dir $round" 60 "${name}_${dir}_$round.log" \
        $PY scripts/dev/hdim512_time.py --rounds 1 $flag --seqlens 2048 8192
    done
  done
done
for round in 1 2; do
  for name in tree diag1 diag2; do for dir in fwd bwd; do
    echo "== $name $dir round $round"; grep "^B " "$OUT/${name}_${dir}_$round.log" | cut -c1-40
  done; done
done
finish
