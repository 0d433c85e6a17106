#!/usr/bin/env bash
# session40_first.sh (prepared in session 39, compiled only), one call, ~7-8 minutes. One variant
# build carries two default-off switches that touch disjoint kernels (as session39_combined.sh):
#   1. issue 12: the d256 forward stages O in the tile's last K and V slots
#      (FLASHSDPA_SM90_FWD_O_IN_KV=1) instead of Q's only slot, so Q is released at the tile's
#      last Q K^T. Session 39's timeline (H100, d256 S 512, tree): each tile waits 4,732 / 5,149
#      cycles (wg 0 / 1) for its Q, of a ~30,100-cycle tile (16%); the direct-store variant, which
#      also released Q early, waited 161 / 130 there but lost the stores' time (scale + stage O 701
#      -> 4,152). Prediction (H100): d256 S 512 +8-12%, 1k +4-7%, 2k +2-4%, 8k +0-1%; causal alike
#      or more; the new wait (the next tile's second K / V, whose slot frees when this tile's O
#      store has read it) hidden under the next tile's first S and softmax. ptxas 13.0: 0 spills in
#      the four d256 kernels; default fwd d64 / d128 / d256 SASS byte-identical.
#      FLASHSDPA_SM90_FWD_O_IN_KV=2 (build var2) also moves thread 0's wait for the store's read
#      (the tree's "tail of epilogue", 1,132 / 973 cycles at d256 S 512, all of warp 0 held) to the
#      next tile's first Q K^T, under which it releases the slots. Prediction: a further +2-3% at
#      S 512, ~0 at 8k. ptxas 13.0: 0 spills.
#   2. issue 11: the decode kernel launched programmatically (FLASHSDPA_DECODE_PDL=1), second form:
#      the combine triggers the next launch past its wait (the first form, before it, let the next
#      call's grid sit resident beside this call's decode grid), and the decode kernel triggers only
#      where a combine follows. First form (session 39, H100, graph us): B 1 x 8k 18.8 -> 19.6,
#      1 x 128k 176.5 -> 213.5, 32 x 4k 172.4 -> 194.5. Prediction (second form): B 1 x 8k -0.3 to
#      -1.0 us, the others within +-0.5%; if B 32 x 4k (one split: no trigger at all) still loses,
#      the programmatic launch itself costs and the switch goes.
#   run(command="bash scripts/dev/session40_first.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
(dev_build fwd_tl /tmp/fwd_tl -DFLASHSDPA_SM90_FWD_TIMELINE=1 -DFLASHSDPA_SM90_FWD_O_IN_KV=1 \
  scripts/dev/fwd_timeline.cu cuda/sm90/tiles_sm90.cu > /dev/null 2>&1) &
build_copy tree "128;256"
BUILD_DTYPES="bf16;fp16" build_copy var "128;256" CUDAFLAGS="-DFLASHSDPA_SM90_FWD_O_IN_KV=1 -DFLASHSDPA_DECODE_PDL=1"
BUILD_DTYPES="bf16;fp16" build_copy var2 "256" CUDAFLAGS="-DFLASHSDPA_SM90_FWD_O_IN_KV=2"
require_copies tree var var2
PYTHONPATH="/tmp/pkg_var/python${SITE:+:$SITE}" tests "variant fwd + decode tests" 240 tests_var.log $PY -m pytest \
  tests/gpu/test_fwd_many_tiles.py tests/gpu/test_fwd_schedule.py tests/gpu/test_kernels.py tests/gpu/test_varlen_clamp.py \
  tests/gpu/test_features_gpu.py tests/gpu/test_dropout_gpu.py tests/gpu/test_windows.py tests/gpu/test_extreme.py \
  tests/gpu/test_kvcache.py tests/gpu/test_masked_decode_gpu.py tests/gpu/test_generation.py tests/gpu/test_streams.py \
  -q -p no:cacheprovider -n 8
for tool in memcheck racecheck synccheck; do
  PYTHONPATH="/tmp/pkg_var/python${SITE:+:$SITE}" sanitize_subset $tool 90 tests/gpu/test_fwd_many_tiles.py tests/gpu/test_kvcache.py
done
PYTHONPATH="/tmp/pkg_var2/python${SITE:+:$SITE}" tests "deferred release d256 tests" 120 tests_var2.log $PY -m pytest \
  tests/gpu/test_fwd_many_tiles.py tests/gpu/test_fwd_schedule.py tests/gpu/test_kernels.py tests/gpu/test_features_gpu.py \
  tests/gpu/test_dropout_gpu.py tests/gpu/test_extreme.py -q -p no:cacheprovider -n 8
for tool in memcheck racecheck synccheck; do
  mv "$OUT/san_$tool.log" "$OUT/san_${tool}_var.log" 2>/dev/null
  PYTHONPATH="/tmp/pkg_var2/python${SITE:+:$SITE}" sanitize_subset $tool 60 tests/gpu/test_fwd_many_tiles.py
done
splits_rounds "tree var"
ab_rounds "tree var var2" 60 --forward --dims 256 --causal both --seqlens 512 1024 2048 8192 > "$OUT/ab_table.txt"
cat "$OUT/ab_table.txt"
wait
if [[ -x /tmp/fwd_tl ]] && (( SECONDS < 540 )); then
  timed "timeline O-in-K/V d256 S 512" 20 fwd_tl_256_512.log /tmp/fwd_tl 256 512 0 0 && cat "$OUT/fwd_tl_256_512.log"
fi
finish
