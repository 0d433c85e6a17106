#!/usr/bin/env bash
# session41_third.sh (session 41), one call, ~9 minutes: two forward / backward switches, each in a
# build of its own, against the tree (3 builds of bf16 + fp16 d64 / d128 / d256):
# - hf: FLASHSDPA_SM90_FWD_HALF_FIRST=1, its branch conditions now votes (session41_second.sh's
#   header; kernel_notes_fwd_sm90.md). Prediction (H100): dense cells and causal 8k within +-0.5% of
#   the tree, causal S 512 +3-5%, causal 1k +1-3%.
# - uw: FLASHSDPA_SM90_UNIFORM_WG=1, the consumer warpgroup's index as a shuffle from lane 0 in both
#   sm90 kernels, so that ptxas keeps the descriptors derived from it in uniform registers (bwd d128
#   plain: R2UR 101 -> 42, S^T's eight HGMMAs over 23 instructions instead of 48; fwd d128 plain R2UR
#   98 -> 50). HALF_FIRST's first form showed the converse: the mainloop's HGMMAs spread over 76
#   instructions instead of 45 cost the forward 5-11%. Prediction (H100): backward +1-3% at every
#   head dim, forward d128 / d256 +0.5-2%, d64 +0-1% (its descriptors were mostly uniform: R2UR 42
#   -> 23).
# The whole GPU suite on uw (it touches every sm90 kernel), the forward tests on hf, memcheck of the
# many-tiles (hf) and test_kernels (uw) subsets, racecheck of uw's; then 3 alternating rounds of the
# forward A/B (tree, hf, uw). The backward A/B (tree, uw) is session41_fourth.sh, the next call.
#   run(command="bash scripts/dev/session41_third.sh", carry=[".whl"], timeout_s=590)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
BUILD_DTYPES="bf16;fp16" build_copy tree "64;128;256"
BUILD_DTYPES="bf16;fp16" build_copy hf "64;128;256" CUDAFLAGS="-DFLASHSDPA_SM90_FWD_HALF_FIRST=1"
BUILD_DTYPES="bf16;fp16" build_copy uw "64;128;256" CUDAFLAGS="-DFLASHSDPA_SM90_UNIFORM_WG=1"
require_copies tree hf uw
PYTHONPATH="/tmp/pkg_uw/python${SITE:+:$SITE}" tests "uw gpu tests" 150 tests_uw.log $PY -m pytest tests/gpu -q \
  -p no:cacheprovider -n 8 -m "not slow"
PYTHONPATH="/tmp/pkg_hf/python${SITE:+:$SITE}" tests "hf fwd tests" 100 tests_hf.log $PY -m pytest \
  "${FWD_TESTS[@]}" tests/gpu/test_sdpa.py -q -p no:cacheprovider -n 8
PYTHONPATH="/tmp/pkg_hf/python${SITE:+:$SITE}" sanitize_subset memcheck 40 tests/gpu/test_fwd_many_tiles.py
mv "$OUT/san_memcheck.log" "$OUT/san_memcheck_hf.log"
for tool in memcheck racecheck; do
  PYTHONPATH="/tmp/pkg_uw/python${SITE:+:$SITE}" sanitize_subset $tool 60 tests/gpu/test_kernels.py
done
AB_STOP=560 ab_rounds "tree hf uw" 60 --forward --dims 128 64 256 --causal both --seqlens 512 1024 2048 8192 \
  > "$OUT/ab_fwd_table.txt"
cat "$OUT/ab_fwd_table.txt"
finish
