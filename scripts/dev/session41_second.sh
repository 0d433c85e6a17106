#!/usr/bin/env bash
# session41_second.sh (session 41), one call, ~5 minutes: FLASHSDPA_SM90_FWD_HALF_FIRST=1 again
# (kernel_notes_fwd_sm90.md, "The first block's softmax on half the columns"), its branch
# conditions now votes. session41_first.sh's run of the first form lost at every cell, 0.88-0.99x,
# dense 8k too: ptxas had taken the branches for divergent (d64 plain kernel: R2UR 49 -> 100 around
# the mainloop's wgmmas, ENDCOLLECTIVE 0 -> 12; with the votes 52 and 0; d128 plain 4,984 SASS
# instructions, R2UR 98 as the tree's). Default off: fwd d64 / d128 / d256 SASS byte-identical.
# Prediction (H100): dense cells and causal 8k within +-0.5% of the tree (the first form's loss was
# the mainloop's code); causal S 512 +3-5% (the first form's 0.99 there carried the ~5% loss its
# dense S 512 cells show), causal 1k +1-3%.
#   run(command="bash scripts/dev/session41_second.sh", carry=[".whl"], timeout_s=540)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy tree "64;128;256"
BUILD_DTYPES="bf16;fp16" build_copy hf "64;128;256" CUDAFLAGS="-DFLASHSDPA_SM90_FWD_HALF_FIRST=1"
require_copies tree hf
PYTHONPATH="/tmp/pkg_hf/python${SITE:+:$SITE}" tests "half-first fwd tests" 180 tests_hf.log $PY -m pytest \
  "${FWD_TESTS[@]}" tests/gpu/test_sdpa.py -q -p no:cacheprovider -n 8
for tool in memcheck racecheck synccheck; do
  PYTHONPATH="/tmp/pkg_hf/python${SITE:+:$SITE}" sanitize_subset $tool 60 tests/gpu/test_fwd_many_tiles.py
done
AB_STOP=480 ab_rounds "tree hf" 60 --forward --dims 128 64 256 --causal both --seqlens 512 1024 2048 8192 > "$OUT/ab_table.txt"
cat "$OUT/ab_table.txt"
finish
