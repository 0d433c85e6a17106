#!/usr/bin/env bash
# (Ran in session 42 at 4ef0b63 / c22a97a; its patch is in the tree since, as BwdTraitsSm90's kGrouped.)
# session42_second.sh (prepared in session 41, compiled only), one call, ~6 minutes: issue 13's
# grouped items at d64 (kernel_notes_bwd_sm90.md, "Grouped items"), from
# scripts/dev/ab/bwd_grouped_wip.patch applied to a copy of the tree: -DFLASHSDPA_SM90_BWD_GROUP=k
# makes the d64 tall backward run k consecutive items (key blocks) per CTA, the ring counting the
# CTA's steps, the next item's first Q / dO loaded during this one's last step and its K / V once
# the consumers' last GEMM of this one has read theirs (kv_empty), its producer warpgroup at 56 registers and consumers at 224 (ptxas 13.0: 0
# spills at k = 2-4, bf16 / fp16; at 24 / 240 the producer's roles spilled 180 bytes). Default (k =
# 1) SASS byte-identical to the tree's. New protocol: the GPU suite on a d64 build first, then
# memcheck / racecheck / synccheck of test_kernels' subset, then 3 alternating rounds of bwd_ab.py,
# tree / k = 2 / k = 4, d64.
# Prediction (H100): S 1k +3-7% (session 15's grid +7.6% / causal +11% at d64 1k, less what 224
# registers cost the step), 2k +2-4%, 8k +0-1%; k = 4 within 1% of k = 2 but a coarser tail.
#   run(command="bash scripts/dev/session42_second.sh", carry=[".whl"], timeout_s=560)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
PATCH="$PWD/scripts/dev/ab/bwd_grouped_wip.patch"
rm -rf /tmp/tree_grp && cp -r "$PWD" /tmp/tree_grp && rm -rf /tmp/tree_grp/build
(cd /tmp/tree_grp && { git apply "$PATCH" 2>/dev/null || patch -p1 -s < "$PATCH"; }) || failed+=("patch")
((${#failed[@]})) && finish
BUILD_DTYPES="bf16;fp16" build_copy tree "64"
(cd /tmp/tree_grp && BUILD_DTYPES="bf16;fp16" build_copy grp2 "64" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_GROUP=2)
(cd /tmp/tree_grp && BUILD_DTYPES="bf16" build_copy grp4 "64" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_GROUP=4)
require_copies tree grp2 grp4
PYTHONPATH="/tmp/pkg_grp2/python${SITE:+:$SITE}" tests "grp2 gpu tests" 150 tests_grp2.log $PY -m pytest tests/gpu -q \
  -p no:cacheprovider -n 8 -m "not slow"
for tool in memcheck racecheck synccheck; do
  PYTHONPATH="/tmp/pkg_grp2/python${SITE:+:$SITE}" sanitize_subset $tool 60 tests/gpu/test_kernels.py
done
((${#failed[@]})) && finish  # no timing of a variant that failed a test
AB_STOP=520 ab_rounds "tree grp2 grp4" 60 --dims 64 --causal both --seqlens 512 1024 2048 8192 > "$OUT/ab_table.txt"
cat "$OUT/ab_table.txt"
finish
