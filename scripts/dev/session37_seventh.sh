#!/usr/bin/env bash
# Record of session 37's call 7 (at 78ce0ba's content, before c1fdd59 folded the switch in): it
# built dedupe with -DFLASHSDPA_SM90_FWD_FAST_ROWS=0 and the tree from 6ae1821's fwd_kernel_sm90.cuh
# as scripts/dev/ab/base_fwd_kernel_sm90.cuh (not kept).
# session37_seventh.sh: the sm90 forward's epilogue scalars leaner (issue 12), against the tree
# (6ae1821: the scalars under the last P V, +0.3-3.4% over session 36's kernel):
#   dedupe: a tile without keys sets its rows empty directly instead of a second copy of the
#           scalars' code (d128 plain kernel 4,744 -> 4,544 SASS instructions);
#   fast:   dedupe + the scalars with MUFU's log2 and reciprocal (__logf, __fdividef: FA2's forms)
#           (-> 4,480).
# The rotated key-block loop lost (session37_sixth: 0.87-0.98x; kernel_notes_fwd_sm90.md).
# Prediction (H100): dedupe ~1.00x; fast +0.5-1.5% at S 512-1k (the scalars, ~1,050 cycles under
# a ~620-cycle P V in the tile timeline, are ~7% of a d128 S 512 tile), ~0 at 8k.
#   1. builds: fast (d 64-512, bf16 + fp16: the suite's), dedupe and the tree (bf16, d 64 / 128);
#   2. memcheck / racecheck / synccheck of the many-tiles subset on fast;
#   3. 3 alternating process rounds of bwd_ab.py --forward, tree / dedupe / fast;
#   4. the whole GPU suite (not slow) on fast.
#   run(command="bash scripts/dev/session37_seventh.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
BUILD_DTYPES="bf16;fp16" build_copy fast "64;128;256;512"
build_copy dedupe "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_FWD_FAST_ROWS=0
swap_build tree cuda/sm90/fwd_kernel_sm90.cuh scripts/dev/ab/base_fwd_kernel_sm90.cuh "64;128"
require_copies tree dedupe fast
for tool in memcheck racecheck synccheck; do
  PYTHONPATH="/tmp/pkg_fast/python${SITE:+:$SITE}" sanitize_subset $tool 60 tests/gpu/test_fwd_many_tiles.py
done
ab_rounds "tree dedupe fast" 50 --forward --dims 128 64 --causal both --seqlens 512 1024 2048 8192 > "$OUT/ab_table.txt"
cat "$OUT/ab_table.txt"
PYTHONPATH="/tmp/pkg_fast/python${SITE:+:$SITE}" tests "gpu tests" 200 tests.log $PY -m pytest tests/gpu -q \
  -p no:cacheprovider -n 8 -m "not slow"
tail -3 "$OUT/tests.log"
finish
