#!/usr/bin/env bash
# session40_third.sh (session 40), one call, ~6-7 minutes:
#   1. the GPU suite on the tree after session 40's promotions (d256's O in the last K / V slots, the
#      decode kernel's programmatic launch: both SASS byte-identical to the variants session40_first.sh
#      tested), on a bf16 / fp16 d64 / d128 / d256 build (the other buckets' tests skip);
#   2. issue 12: FLASHSDPA_SM90_FWD_WARP_STORE=1 (each warp's lane 0 stores its 16 O rows by TMA as
#      soon as the warp has staged them: no warpgroup barrier before the store, four issuers),
#      forward tests, memcheck / racecheck of the many-tiles subset, 3 alternating A/B rounds.
#      Prediction (H100): d128 / d64 S 512 +0.5-1.5%, d256 S 512 +1-3%, 8k within +-0.5%.
#   run(command="bash scripts/dev/session40_third.sh", carry=[".whl"], timeout_s=560)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
BUILD_DTYPES="bf16;fp16" build_copy tree "64;128;256"
build_copy ws "64;128;256" CUDAFLAGS="-DFLASHSDPA_SM90_FWD_WARP_STORE=1"
require_copies tree ws
PYTHONPATH="/tmp/pkg_ws/python${SITE:+:$SITE}" tests "warp-store fwd tests" 150 tests_ws.log $PY -m pytest \
  tests/gpu/test_fwd_many_tiles.py tests/gpu/test_fwd_schedule.py tests/gpu/test_kernels.py tests/gpu/test_varlen_clamp.py \
  tests/gpu/test_features_gpu.py tests/gpu/test_dropout_gpu.py tests/gpu/test_windows.py tests/gpu/test_extreme.py \
  -q -p no:cacheprovider -n 8
PYTHONPATH="/tmp/pkg_tree/python${SITE:+:$SITE}" tests "gpu tests (tree)" 200 tests.log $PY -m pytest tests/gpu -q \
  -p no:cacheprovider -n 8 -m "not slow"
tail -3 "$OUT/tests.log"
for tool in memcheck racecheck; do
  PYTHONPATH="/tmp/pkg_ws/python${SITE:+:$SITE}" sanitize_subset $tool 60 tests/gpu/test_fwd_many_tiles.py
done
AB_STOP=470 ab_rounds "tree ws" 60 --forward --dims 128 64 256 --causal both --seqlens 512 1024 2048 8192 > "$OUT/ab_table.txt"
cat "$OUT/ab_table.txt"
finish
