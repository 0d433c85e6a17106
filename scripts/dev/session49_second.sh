#!/usr/bin/env bash
# session49_second.sh (prepared in session 48, compiled only), one call, ~3 minutes: the backward's
# wave groups at 16 key blocks a head (-DFLASHSDPA_SM90_BWD_WAVE_GROUP_BLOCKS=16; the tree's bound
# is 8: session 48 measured d128 causal S 512 +20% and 1k +15%, and did not try 2k). At d128 causal
# 2k the 32 MB group is 32 heads and its first wave key blocks 0-3 of them (32 MB of Q / dO in a
# wave of 32-step CTAs); a wave's worth is 9 heads, every key block of them in one wave. Builds: the
# tree (wb8) and the variant (wb16), bf16 d64 / d128 (only d128's plain kernel changes: d64's 2k
# causal calls run grouped items); the causal backward tests on wb16; 3 alternating process rounds
# of bwd_ab.py, causal, 2k and 4k (4k: 32 blocks, unchanged: the control). Prediction: d128 2k
# causal +-3% (the forward's sections lost 6-7% at 2k, but its 2k tiles read K / V a block at a time
# where the backward's read all of a head's Q / dO per CTA), GQA 16/4 B 4 2k (16 blocks) alike.
#   run(command="bash scripts/dev/session49_second.sh", carry=[".whl"], timeout_s=300)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16" build_copy wb8 "64;128"
BUILD_DTYPES="bf16" build_copy wb16 "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_WAVE_GROUP_BLOCKS=16
require_copies wb8 wb16
PYTHONPATH="/tmp/pkg_wb16/python${SITE:+:$SITE}" tests "causal bwd tests (wb16)" 60 tests_wb16.log \
  $PY -m pytest tests/gpu/test_kernels.py -q -p no:cacheprovider -n 8 -k "bwd and causal"
((${#failed[@]})) && finish
bwd_ab_rounds 3 "wb8 wb16" --dims 128 --causal yes --seqlens 2048 4096
finish
