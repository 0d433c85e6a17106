#!/usr/bin/env bash
# session38_first.sh (prepared in session 37, compiled only), one call, ~7 minutes:
#   1. (the ncu part moved to session38_second.sh, to keep this call under ~7 minutes)
#   2. issue 11: the decode timeline with the combine's two inner points (LSEs reduced, the first
#      chunk's partials summed): where its ~2.0 us after the release go. Prediction: the partials'
#      loads (one L2 round trip, ~0.8 us) and the LSE reduce (~0.5 us), the store ~0.5.
#   3. issue 13: FLASHSDPA_SM90_BWD_FMA_EXP = 2 / 4 (of every 8 exponentials on the FMA pipe) against
#      the tree: backward tests and memcheck on both, then 3 alternating process rounds of
#      bwd_ab.py (d128 / d64, 1k / 2k / 8k, causal both). Prediction: d64 +2-4% (its exponentials
#      are a third of the step, 2,100 of 6,070 cycles), d128 +0-2%; 4 of 8 no better than 2.
#   4. issue 9: the small step's GPU time with Hugging Face's layout (--bshd: FA2 needs no copies
#      there; session 37's BHSD numbers gave FA2 two copy kernels). Prediction: FA2 ~52 us, ours ~49.
#   run(command="bash scripts/dev/session38_first.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
if dev_build decode_tl /tmp/decode_tl -DFLASHSDPA_GRID_TIMELINE=1 scripts/dev/decode_timeline.cu; then
  timed "decode timeline" 60 decode_timeline.log /tmp/decode_tl
  cat "$OUT/decode_timeline.log"
fi
build_copy tree "64;128"
BUILD_DTYPES="bf16;fp16" build_copy fma2 "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_FMA_EXP=2
BUILD_DTYPES="bf16;fp16" build_copy fma4 "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_FMA_EXP=4
require_copies tree fma2 fma4
for name in fma2 fma4; do
  PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" tests "$name backward tests" 150 tests_$name.log $PY -m pytest \
    tests/gpu/test_kernels.py tests/gpu/test_extreme.py tests/gpu/test_masks_gpu.py tests/gpu/test_one_hot_grads.py \
    -q -p no:cacheprovider -n 8
done
PYTHONPATH="/tmp/pkg_fma4/python${SITE:+:$SITE}" sanitize_subset memcheck 60 tests/gpu/test_kernels.py
ab_rounds "tree fma2 fma4" 60 --dims 128 64 --causal both --seqlens 1024 2048 8192 > "$OUT/ab_table.txt"
cat "$OUT/ab_table.txt"
for causal in "" --no-causal; do
  PYTHONPATH="/tmp/pkg_tree/python${SITE:+:$SITE}" timed "small step graph bshd $causal" 90 "graph_bshd$causal.log" \
    $PY scripts/dev/small_step_kernels.py --graph --bshd $causal
done
cat "$OUT"/graph_bshd*.log
finish
