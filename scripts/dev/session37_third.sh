#!/usr/bin/env bash
# session37_third.sh (prepared in session 36): issue 9's last gap, kernel by kernel. The small bf16
# model's step stays ~1.02x FA2-only with the shim's host cost at or below PyTorch's: what is left is
# kernel time at tiny shapes (shim_cost.py, session 25: the attention-only step B 8 x H 16 x S 256 x
# D 64 causal, 60.6 us of kernels inside enable() against FA2's 48.5 and cuDNN's 42.5).
# scripts/dev/small_step_kernels.py (session 25, never run) lists every GPU activity of one step per
# variant, then ours with the portable family forced (FLASHSDPA_FAMILY=sm80): whether the sm90
# backward's fixed passes (preprocess, dQ postprocess, the forward's tile-counter memset) or its
# main kernel make the gap, and whether the portable family serves such grids faster (then a
# backward speed rule, as the forward's fwd_sm90_yields, is the fix). Non-causal too.
# Prediction: the sm90 backward's three kernels ~35 us against FA2's ~30; the portable one faster
# at this shape; the forward level (the portable family already serves it by the speed rule).
# First (issue 11, ~15 s, no package build): the decode call's grid from one clock
# (scripts/dev/decode_timeline.cu, -DFLASHSDPA_GRID_TIMELINE=1: each CTA's start and end by
# %globaltimer, the combine's start / wait / end), B 1 x 8k, B 1 x 128k, B 32 x 4k, plain and in a
# replayed graph: where the B 1 x 8k call's ~16 us go beyond the ~8 us of its K / V bytes.
# Prediction: the decode grid's CTAs ~9-10 us (264 CTAs, 2 an SM, started within ~1 us), its tail
# (median end to last end) ~1-2 us, the combine ~2-3 us past the last decode CTA.
#   run(command="bash scripts/dev/session37_third.sh", carry=[".whl"], timeout_s=400)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
if dev_build decode_tl /tmp/decode_tl -DFLASHSDPA_GRID_TIMELINE=1 scripts/dev/decode_timeline.cu; then
  timed "decode timeline" 60 decode_timeline.log /tmp/decode_tl
  cat "$OUT/decode_timeline.log"
fi
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 240 "64;128"
timed "small step kernels" 120 small.log $PY scripts/dev/small_step_kernels.py --steps 50
FLASHSDPA_FAMILY=sm80 timed "small step, portable" 60 small_sm80.log $PY scripts/dev/small_step_kernels.py \
  --steps 50 --only-ours
timed "small step, non-causal" 120 small_nc.log $PY scripts/dev/small_step_kernels.py --steps 50 --no-causal
FLASHSDPA_FAMILY=sm80 timed "small step, non-causal, portable" 60 small_nc_sm80.log \
  $PY scripts/dev/small_step_kernels.py --steps 50 --no-causal --only-ours
cat "$OUT"/small*.log
finish
