#!/usr/bin/env bash
# session37_second.sh (prepared in session 36, compiled only): where a tile's boundary goes in the
# sm90 forward at short sequences (issue 12: d128 S 512 0.94x cuDNN, d64 S 512 causal 0.81x on the
# H100), from the kernel's own clock: scripts/dev/fwd_timeline.cu with
# -DFLASHSDPA_SM90_FWD_TIMELINE=1 (per consumer warpgroup and tile of two CTAs: Q wait, K wait and
# turn, first S, first softmax, middle blocks, last P V, epilogue, hand-over; the tile's excess over
# its blocks at the middle blocks' rate). Session 35's ncu put ~2.4 key blocks' worth of stall
# samples on a tile's own code (cuDNN ~0.7); samples count waiting warps, this counts the clock.
# Prediction: d128 S 512 excess ~1.0-1.5 blocks a tile (of 4), most of it the first S + softmax
# (no GEMM of the other warpgroup under it at the tile's start) and the last P V + epilogue.
# Then the sm90 backward's step in phases (scripts/dev/bwd_timeline.sh: d128 and d64, three CTAs;
# kernel_notes_bwd_sm90.md, "The d128 step in phases"), ~2 minutes more.
#   run(command="bash scripts/dev/session37_second.sh", timeout_s=360)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
dev_build fwd_tl /tmp/fwd_tl -DFLASHSDPA_SM90_FWD_TIMELINE=1 scripts/dev/fwd_timeline.cu cuda/sm90/tiles_sm90.cu || finish
for cell in "128 512 0" "128 512 1" "64 512 1" "64 512 0" "128 2048 0" "128 8192 0"; do
  timed "timeline d${cell// /_}" 60 "tl_${cell// /_}.log" /tmp/fwd_tl $cell 0 77
done
cat "$OUT"/tl_*.log
mkdir -p "$OUT/bwd"
OUT="$OUT/bwd" timeout 240 bash scripts/dev/bwd_timeline.sh > "$OUT/bwd_timeline.log" 2>&1
rc=$?
step "bwd timeline" "rc=$rc"
check "bwd timeline" $rc
grep -h -A9 "consumer phases" "$OUT"/bwd/timeline*.log 2>/dev/null
finish
