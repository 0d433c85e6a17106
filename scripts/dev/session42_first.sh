#!/usr/bin/env bash
# session42_first.sh (prepared in session 41, compiled only), one call, ~7 minutes: issue 13's
# FLASHSDPA_SM90_BWD_UNIFORM_ALL=1, the backward's uniform consumer warpgroup index (session 41: d256
# won +0.3-4% and is the tree's form) at d64 and d128 too, with the dQ writer's loop state opaque so
# that its 24 registers no longer spill (session 41's d128 variant spilled 8 bytes there, two LDL a
# step, and lost ~1%; now 0 spills in every bf16 / fp16 d64 / d128 backward kernel, no C75xx; d128
# plain R2UR 101 -> 55, 3,424 -> 3,328 SASS instructions; default SASS byte-identical).
# Prediction (H100, 3 alternating rounds of bwd_ab.py against the tree): d128 +1-3% (the S^T / dP^T
# issue denser without the writer's loss), d64 +0-1.5%, GQA as d128; d256 unchanged (1.00).
# The whole GPU suite on the variant, memcheck / racecheck of test_kernels' subset, the A/B, then
# `bench --quick` on the tree.
#   run(command="bash scripts/dev/session42_first.sh", carry=[".whl"], timeout_s=560)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
BUILD_DTYPES="bf16;fp16" build_copy tree "64;128;256"
BUILD_DTYPES="bf16;fp16" build_copy ua "64;128;256" CUDAFLAGS="-DFLASHSDPA_SM90_BWD_UNIFORM_ALL=1"
require_copies tree ua
PYTHONPATH="/tmp/pkg_ua/python${SITE:+:$SITE}" tests "ua gpu tests" 150 tests_ua.log $PY -m pytest tests/gpu -q \
  -p no:cacheprovider -n 8 -m "not slow"
for tool in memcheck racecheck; do
  PYTHONPATH="/tmp/pkg_ua/python${SITE:+:$SITE}" sanitize_subset $tool 60 tests/gpu/test_kernels.py
done
AB_STOP=470 ab_rounds "tree ua" 100 --dims 128 64 256 --causal both --seqlens 1024 2048 8192 > "$OUT/ab_table.txt"
cat "$OUT/ab_table.txt"
# The package's benchmark on the tree (session 41's promoted uniform index ran the A/Bs, not it).
(( SECONDS < 480 )) && PYTHONPATH="/tmp/pkg_tree/python${SITE:+:$SITE}" timed "bench quick" 75 bench.log \
  $PY -m flashsdpa bench --quick --out /tmp/b_quick && tail -25 "$OUT/bench.log"
finish
