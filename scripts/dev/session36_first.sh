#!/usr/bin/env bash
# session36_first.sh (prepared in session 35, run in session 36): the sm90 forward's chained tiles again
# (kernel_notes_fwd_sm90.md, "Chained tiles"), from scripts/dev/ab/fwd_chain.patch (session 35's
# variant, 0fb3214, plus an adaptive form): FLASHSDPA_SM90_FWD_CHAIN=1 chains every tile (lost
# 0.92-0.99x on the H100), =2 (the patch's default) only where the next tile's Q and first K have
# landed (test_wait), a warpgroup that chained taking an empty turn at the next tile's start.
# 1. ncu of the always-chained kernel and the tree's at d128 S 512 (where the chain's extra time
#    goes: the next Q / K waits at the chain point, the prediction of the notes, or elsewhere);
# 2. the adaptive build's forward tests (many tiles, schedules, split tail, test_kernels) and its
#    memcheck / racecheck / synccheck on test_fwd_many_tiles' sanitizer subset;
# 3. 3 alternating process rounds of bwd_ab.py --forward, tree / chain1 / chain2, d128 and d64,
#    S 512 / 1k / 2k / 8k, causal and not.
# Prediction (adaptive): no cell below 0.99x the tree; +2-4% at S 512 if the next tile's data is
# there at most boundaries; if it is rarely there, ~1.00x everywhere (the test costs ~10 cycles).
# Outcome (session 36, H100): both forms lost (chain1 0.93-1.00x, chain2 0.93-1.01x; ncu: the chain
# point waits for the next tile's Q); kernel_notes_fwd_sm90.md, "Chained tiles".
#   run(command="bash scripts/dev/session36_first.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
PATCH="$PWD/scripts/dev/ab/fwd_chain.patch"
for name in chain1 chain2; do
  rm -rf /tmp/tree_$name && cp -r "$PWD" /tmp/tree_$name && rm -rf /tmp/tree_$name/build
  (cd /tmp/tree_$name && { git apply "$PATCH" 2>/dev/null || patch -p1 -s < "$PATCH"; }) || failed+=("patch $name")
done
((${#failed[@]})) && finish
(cd /tmp/tree_chain1 && BUILD_DTYPES="bf16;fp16" build_copy chain1 "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_FWD_CHAIN=1) &
(cd /tmp/tree_chain2 && BUILD_DTYPES="bf16;fp16" build_copy chain2 "64;128" CUDAFLAGS=) &
BUILD_DTYPES="bf16;fp16" build_copy tree "64;128" CUDAFLAGS=
wait
for name in tree chain1 chain2; do
  ls /tmp/pkg_$name/python/flashsdpa/_C*.so >/dev/null 2>&1 || { tail -20 "$OUT/build_$name.log"; failed+=("build $name"); }
done
((${#failed[@]})) && finish
PYTHONPATH="/tmp/pkg_chain1/python${SITE:+:$SITE}" ncu_kernel chain1_d128_s512 "flashsdpa_fwd" 120 \
  $PY scripts/dev/fwd_profile.py 128 512 0 > /dev/null
PYTHONPATH="/tmp/pkg_tree/python${SITE:+:$SITE}" ncu_kernel tree_d128_s512 "flashsdpa_fwd" 120 \
  $PY scripts/dev/fwd_profile.py 128 512 0 > /dev/null
ncu_compare tree_d128_s512 chain1_d128_s512
PYTHONPATH="/tmp/pkg_chain2/python${SITE:+:$SITE}" tests "chain2 forward tests" 150 tests_chain2.log $PY -m pytest \
  tests/gpu/test_fwd_many_tiles.py tests/gpu/test_fwd_schedule.py tests/gpu/test_split_tail.py tests/gpu/test_kernels.py \
  -q -p no:cacheprovider -n 8
for tool in memcheck racecheck synccheck; do
  PYTHONPATH="/tmp/pkg_chain2/python${SITE:+:$SITE}" sanitize_subset $tool 60 tests/gpu/test_fwd_many_tiles.py
done
ab_rounds "tree chain1 chain2" 60 --forward --dims 128 64 --causal both --seqlens 512 1024 2048 8192 \
  > "$OUT/ab_table.txt"
cat "$OUT/ab_table.txt"
finish
