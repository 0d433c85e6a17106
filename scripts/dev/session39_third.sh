#!/usr/bin/env bash
# session39_third.sh (session 39), one call, ~4 minutes: issue 12's d256 forward with O staged in the
# tile's last K and V slots (FLASHSDPA_SM90_FWD_O_IN_KV=1) instead of Q's only slot, so Q is
# released at the tile's last Q K^T. Session 39's timeline (H100, d256 S 512, tree): each tile waits
# 4,732 / 5,149 cycles for its Q of a ~30,100-cycle tile (16%); the direct-store variant, which also
# released Q early, waited 161 / 130 but lost its stores' time (scale + stage O 701 -> 4,152).
# Prediction (H100): d256 S 512 +8-12%, 1k +4-7%, 2k +2-4%, 8k +0-1%; causal alike or more (shorter
# tiles); the new wait (the next tile's second K / V slot, released after this tile's O store has
# read it) hidden under the next tile's first S and softmax. Default off: fwd d128 / d256 SASS
# byte-identical. ptxas 13.0: 0 spills in the four d256 kernels.
#   run(command="bash scripts/dev/session39_third.sh", carry=[".whl"], timeout_s=...)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
(dev_build fwd_tl /tmp/fwd_tl -DFLASHSDPA_SM90_FWD_TIMELINE=1 -DFLASHSDPA_SM90_FWD_O_IN_KV=1 \
  scripts/dev/fwd_timeline.cu cuda/sm90/tiles_sm90.cu > /dev/null 2>&1) &
build_copy tree "256"
BUILD_DTYPES="bf16;fp16" build_copy oinkv "256" CUDAFLAGS=-DFLASHSDPA_SM90_FWD_O_IN_KV=1
require_copies tree oinkv
PYTHONPATH="/tmp/pkg_oinkv/python${SITE:+:$SITE}" tests "O-in-K/V d256 tests" 150 tests_oinkv.log $PY -m pytest \
  tests/gpu/test_fwd_many_tiles.py tests/gpu/test_fwd_schedule.py tests/gpu/test_kernels.py tests/gpu/test_varlen_clamp.py \
  tests/gpu/test_features_gpu.py tests/gpu/test_dropout_gpu.py tests/gpu/test_windows.py tests/gpu/test_extreme.py \
  -q -p no:cacheprovider -n 8
for tool in memcheck racecheck synccheck; do
  PYTHONPATH="/tmp/pkg_oinkv/python${SITE:+:$SITE}" sanitize_subset $tool 60 tests/gpu/test_fwd_many_tiles.py
done
ab_rounds "tree oinkv" 40 --forward --dims 256 --causal both --seqlens 512 1024 2048 8192 > "$OUT/ab_table.txt"
cat "$OUT/ab_table.txt"
wait
if [[ -x /tmp/fwd_tl ]] && (( SECONDS < 240 )); then
  timed "timeline oinkv d256 S 512" 20 fwd_tl_256_512.log /tmp/fwd_tl 256 512 0 0 && cat "$OUT/fwd_tl_256_512.log"
fi
finish
