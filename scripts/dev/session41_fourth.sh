#!/usr/bin/env bash
# session41_fourth.sh (session 41), the call after session41_third.sh on the same machine, ~4
# minutes: the backward A/B of FLASHSDPA_SM90_UNIFORM_WG=1 (its header has the prediction: +1-3% at
# every head dim) against the tree, 3 alternating rounds, d128 / d64 / d256, S 1k / 2k / 8k, causal
# and not, plus the GQA train shapes. The builds are session41_third.sh's if /tmp kept them
# (build_copy is then incremental), else made again (~80 s).
#   run(command="bash scripts/dev/session41_fourth.sh", carry=[".whl"], timeout_s=400)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
BUILD_DTYPES="bf16;fp16" build_copy tree "64;128;256"
BUILD_DTYPES="bf16;fp16" build_copy uw "64;128;256" CUDAFLAGS="-DFLASHSDPA_SM90_UNIFORM_WG=1"
require_copies tree uw
AB_STOP=380 ab_rounds "tree uw" 100 --dims 128 64 256 --causal both --seqlens 1024 2048 8192 > "$OUT/ab_bwd_table.txt"
cat "$OUT/ab_bwd_table.txt"
finish
