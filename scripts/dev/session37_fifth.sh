#!/usr/bin/env bash
# session37_fifth.sh: the sm90 forward's epilogue under its last P V (issue 12; kernel_notes_fwd_sm90.md,
# "The tile's epilogue in phases"). session37_fourth's timeline (d128 S 512, H100): the epilogue
# ~2,150 cycles a tile per warpgroup, of which the rows' scalars (quad sums, logf, reciprocal) 764,
# the O rows' wait + sync 292, the LSE store 364; none of those needs O. Now they run under the
# last P V (~620 cycles), leaving O's scale, staging and the TMA store after its wait.
# Prediction (H100): tile period at d128 S 512 15,200 -> ~14,300 cycles; d128 / d64 S 512 +4-6%,
# 1k +2-3%, 8k +0-0.5%; tests pass.
#   1. the timeline again (d128 S 512, d64 S 512, d128 8k);
#   2. the package with it (d 64-512, bf16 + fp16), and the tree's fwd_kernel_sm90.cuh built apart
#      (bf16, d 64 / 128; scripts/dev/ab/base_fwd_kernel_sm90.cuh, HEAD's file);
#   3. forward tests on the new build (many tiles, schedules, split tail, test_kernels, dropout,
#      features, d512), memcheck / racecheck / synccheck of the many-tiles subset;
#   4. 3 alternating process rounds of bwd_ab.py --forward, tree / early.
#   run(command="bash scripts/dev/session37_fifth.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
if dev_build fwd_tl /tmp/fwd_tl -DFLASHSDPA_SM90_FWD_TIMELINE=1 scripts/dev/fwd_timeline.cu cuda/sm90/tiles_sm90.cu; then
  for cell in "128 512 0" "64 512 0" "128 8192 0"; do
    timed "timeline d${cell// /_}" 60 "tl_${cell// /_}.log" /tmp/fwd_tl $cell 0
  done
  cat "$OUT"/tl_*.log
fi
BUILD_DTYPES="bf16;fp16" build_copy early "64;128;256;512"
swap_build tree cuda/sm90/fwd_kernel_sm90.cuh scripts/dev/ab/base_fwd_kernel_sm90.cuh "64;128"
require_copies tree early
PYTHONPATH="/tmp/pkg_early/python${SITE:+:$SITE}" tests "early forward tests" 300 tests_early.log $PY -m pytest \
  tests/gpu/test_fwd_many_tiles.py tests/gpu/test_fwd_schedule.py tests/gpu/test_split_tail.py tests/gpu/test_kernels.py \
  tests/gpu/test_dropout_gpu.py tests/gpu/test_features_gpu.py tests/gpu/test_hdim512.py -q -p no:cacheprovider -n 8
for tool in memcheck racecheck synccheck; do
  PYTHONPATH="/tmp/pkg_early/python${SITE:+:$SITE}" sanitize_subset $tool 60 tests/gpu/test_fwd_many_tiles.py
done
ab_rounds "tree early" 60 --forward --dims 128 64 --causal both --seqlens 512 1024 2048 8192 > "$OUT/ab_table.txt"
cat "$OUT/ab_table.txt"
finish
