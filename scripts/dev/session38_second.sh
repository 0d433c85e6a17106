#!/usr/bin/env bash
# session38_second.sh (prepared in session 37, compiled only): the sm90 forward popping its next
# tile under the last P V (FLASHSDPA_SM90_FWD_EARLY_POP=1; issue 12, kernel_notes_fwd_sm90.md, "The
# epilogue in phases"): session 37's timeline put the queue pop at ~250 cycles after each tile's
# epilogue (d128 S 512, a tile ~15,100 cycles). ptxas 13.0: 0 spills, no C75xx at d64 / d128 /
# d256; the default build's SASS is byte-identical to the tree's.
# Prediction (H100): +0.5-1.5% at S 512 and 1k, ~0 at 8k; tests and sanitizers clean.
#   1. the tile timeline with it (d128 S 512; the "queue pop" phase moves under the last P V);
#   2. the package with it (d 64-256, bf16 + fp16) and the tree (bf16, d 64 / 128);
#   3. forward tests (many tiles, schedules, split tail, test_kernels with its varlen table) and
#      memcheck / racecheck / synccheck of the many-tiles subset;
#   4. 3 alternating process rounds of bwd_ab.py --forward, tree / early pop;
#   (before 3) ncu of the tree's d128 S 512 forward (full set, clocks left alone), its kernel-wide
#      warp-stall breakdown from the raw page (smsp__pcsamp_warps_issue_stalled_*) and the source
#      page's columns: is the once-a-tile code's 3-5 cycles an instruction (session 37's tile
#      timeline) "no instruction" stalls (instruction-cache misses)? Prediction: no_instructions
#      >= 10% of the samples, most of them on the once-a-tile code.
#   run(command="bash scripts/dev/session38_second.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
if dev_build fwd_tl /tmp/fwd_tl -DFLASHSDPA_SM90_FWD_TIMELINE=1 -DFLASHSDPA_SM90_FWD_EARLY_POP=1 \
    scripts/dev/fwd_timeline.cu cuda/sm90/tiles_sm90.cu; then
  timed "timeline d128 S 512" 60 tl_128_512.log /tmp/fwd_tl 128 512 0 0
  cat "$OUT/tl_128_512.log"
fi
BUILD_DTYPES="bf16;fp16" build_copy pop "64;128;256" CUDAFLAGS=-DFLASHSDPA_SM90_FWD_EARLY_POP=1
build_copy tree "64;128"
require_copies tree pop
PYTHONPATH="/tmp/pkg_tree/python${SITE:+:$SITE}" ncu_kernel tree_d128_s512 "flashsdpa_fwd" 150 \
  $PY scripts/dev/fwd_profile.py 128 512 0 > /dev/null
ncu -i /tmp/ncu_tree_d128_s512.ncu-rep --page raw 2>/dev/null | grep -E "pcsamp_warps_issue_stalled|pcsamp_sample_count" \
  > "$OUT/ncu_stalls.txt"
sort -k3 -g -r "$OUT/ncu_stalls.txt" | head -25
zcat "$OUT/ncu_tree_d128_s512_source.csv.gz" | grep -m1 '"Address"\|"#"' | tr ',' '\n' | head -60 > "$OUT/ncu_source_columns.txt"
echo "source page columns:"; tr '\n' ' ' < "$OUT/ncu_source_columns.txt"; echo
PYTHONPATH="/tmp/pkg_pop/python${SITE:+:$SITE}" tests "early pop forward tests" 240 tests_pop.log $PY -m pytest \
  tests/gpu/test_fwd_many_tiles.py tests/gpu/test_fwd_schedule.py tests/gpu/test_split_tail.py tests/gpu/test_kernels.py \
  tests/gpu/test_dropout_gpu.py -q -p no:cacheprovider -n 8
for tool in memcheck racecheck synccheck; do
  PYTHONPATH="/tmp/pkg_pop/python${SITE:+:$SITE}" sanitize_subset $tool 60 tests/gpu/test_fwd_many_tiles.py
done
ab_rounds "tree pop" 50 --forward --dims 128 64 --causal both --seqlens 512 1024 2048 8192 > "$OUT/ab_table.txt"
cat "$OUT/ab_table.txt"
finish
