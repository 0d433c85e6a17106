#!/usr/bin/env bash
# Record of session 37's call 6: it ran with scripts/dev/ab/fwd_rotated.patch applied to the tree
# (6ae1821) and 6ae1821's fwd_kernel_sm90.cuh as scripts/dev/ab/base_fwd_kernel_sm90.cuh (not kept).
# session37_sixth.sh: the sm90 forward's key-block loop rotated (issue 12; kernel_notes_fwd_sm90.md,
# "The tile's epilogue in phases"): the first block's softmax runs in the loop's code instead of a
# peeled copy (631 SASS instructions run once a tile at d128; session37_fourth's timeline put that
# softmax at ~1,600 cycles, the code cold in the instruction caches at each tile). Only the first
# block's S is issued before the loop. ptxas 13.0: 0 spills, no C75xx (a form with a branch around
# the first block's P V serialized the wgmmas, C7520). d128 plain kernel 4,512 -> 4,336 SASS
# instructions, dropout 3,968 -> 3,320, bias 6,952 -> 5,744.
# Prediction (H100): d128 / d64 S 512 +2-4% over the committed tree (6ae1821), 1k +1-2%, 8k ~0.
#   1. the timeline (d128 S 512, d64 S 512);
#   2. the package (d 64-512, bf16 + fp16) and HEAD's fwd_kernel_sm90.cuh built apart (bf16, d 64 / 128);
#   3. memcheck / racecheck / synccheck of the many-tiles subset on the new build;
#   4. 3 alternating process rounds of bwd_ab.py --forward, tree / rotated;
#   5. the whole GPU suite (not slow) on the new build (session 37's only full run).
#   run(command="bash scripts/dev/session37_sixth.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
if dev_build fwd_tl /tmp/fwd_tl -DFLASHSDPA_SM90_FWD_TIMELINE=1 scripts/dev/fwd_timeline.cu cuda/sm90/tiles_sm90.cu; then
  for cell in "128 512 0" "64 512 0"; do
    timed "timeline d${cell// /_}" 60 "tl_${cell// /_}.log" /tmp/fwd_tl $cell 0
  done
  cat "$OUT"/tl_*.log
fi
BUILD_DTYPES="bf16;fp16" build_copy rotated "64;128;256;512"
swap_build tree cuda/sm90/fwd_kernel_sm90.cuh scripts/dev/ab/base_fwd_kernel_sm90.cuh "64;128"
require_copies tree rotated
for tool in memcheck racecheck synccheck; do
  PYTHONPATH="/tmp/pkg_rotated/python${SITE:+:$SITE}" sanitize_subset $tool 60 tests/gpu/test_fwd_many_tiles.py
done
ab_rounds "tree rotated" 50 --forward --dims 128 64 --causal both --seqlens 512 1024 2048 8192 > "$OUT/ab_table.txt"
cat "$OUT/ab_table.txt"
PYTHONPATH="/tmp/pkg_rotated/python${SITE:+:$SITE}" tests "gpu tests" 250 tests.log $PY -m pytest tests/gpu -q \
  -p no:cacheprovider -n 8 -m "not slow"
tail -3 "$OUT/tests.log"
finish
