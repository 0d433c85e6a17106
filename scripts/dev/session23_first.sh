#!/usr/bin/env bash
# session23_first.sh (session 22, prepared; for the next session's first call): the sm90 backward's
# dQ writer after the flag probe. 1. the timeline again (CTA 1000, d128 and d64) of the default
# kernel and of -DFLASHSDPA_SM90_BWD_COUNT_PAIRS=1 (the adds counted two at a time); 2. the A/B of
# count pairs (cp) and of count pairs with a third dQ staging buffer at d64 (cp3:
# -DFLASHSDPA_SM90_BWD_DQ_BUFS64=3; at d128 cp3 is cp) against the default: memcheck and the kernel
# tests on cp3, 3 alternating rounds of bwd_ab.py. kernel_notes_bwd_sm90.md, "Counting the adds in
# pairs", has the predictions.
#   run(command="bash scripts/dev/session23_first.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
OUT="$OUT/tl" TIMELINE_CTAS=1000 bash scripts/dev/bwd_timeline.sh > /tmp/tl.log 2>&1 &
OUT="$OUT/tl_cp" TIMELINE_CTAS=1000 TIMELINE_TAG=_cp TIMELINE_FLAGS=-DFLASHSDPA_SM90_BWD_COUNT_PAIRS=1 \
  bash scripts/dev/bwd_timeline.sh > /tmp/tl_cp.log 2>&1 &
build_copy base "64;128" CUDAFLAGS= FLASHSDPA_FAMILIES=sm90 &
build_copy cp "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_COUNT_PAIRS=1 FLASHSDPA_FAMILIES=sm90 &
build_copy cp3 "64;128" CUDAFLAGS="-DFLASHSDPA_SM90_BWD_COUNT_PAIRS=1 -DFLASHSDPA_SM90_BWD_DQ_BUFS64=3" &
wait
tail -4 /tmp/tl.log /tmp/tl_cp.log
for name in base cp cp3; do
  ls /tmp/pkg_$name/python/flashsdpa/_C*.so >/dev/null 2>&1 || { tail -20 "$OUT/build_$name.log"; failed+=("build $name"); }
done
((${#failed[@]})) && finish
PYTHONPATH="/tmp/pkg_cp3/python:$SITE" timed "memcheck cp3" 60 memcheck_cp3.log \
  compute-sanitizer --tool memcheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY scripts/dev/bwd_small.py def
PYTHONPATH="/tmp/pkg_cp3/python:$PWD/tests:$SITE" tests "tests cp3" 120 tests_cp3.log $PY -m pytest -q -p no:cacheprovider -n 12 \
  tests/gpu/test_kernels.py tests/gpu/test_one_hot_grads.py
ab_rounds "base cp cp3" 60 --dims 128 64 --seqlens 2048 8192
finish
