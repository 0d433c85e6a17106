#!/usr/bin/env bash
# bwd_probe_ab.sh (session 22): the dQ writer's flag probe (kernel_notes_bwd_sm90.md, "The flag
# probe"). Builds (bf16, d64 + d128, in parallel):
#   base  the tree with .ab_base/ laid over it (the kernel before the change: pointer semaphores),
#   p1    -DFLASHSDPA_SM90_BWD_FLAG_PROBE=1 (the next tile's flag read while this tile is read),
#   p2    =2 (and its proxy fence there too).
# memcheck of p1 and p2 (the probe's semaphore index), the sm90 kernel tests on p2, then 3 rounds
# alternating one process per build of bwd_ab.py (d128 2k / 8k and the GQA train shapes, d64 8k,
# causal or not). Table last.
#   run(command="bash scripts/dev/bwd_probe_ab.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
ROOT=$PWD
rm -rf /tmp/basetree && cp -r "$ROOT" /tmp/basetree && cp -r .ab_base/. /tmp/basetree/ && rm -rf /tmp/basetree/build
t0=$(date +%s)
# In parallel; base and p1 (A/B only) without the portable family, p2 (tests too) with both.
(cd /tmp/basetree && build_copy base "64;128" CUDAFLAGS= FLASHSDPA_FAMILIES=sm90) &
build_copy p1 "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_FLAG_PROBE=1 FLASHSDPA_FAMILIES=sm90 &
build_copy p2 "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_FLAG_PROBE=2 &
wait
for name in base p1 p2; do
  [[ -f /tmp/pkg_$name/python/flashsdpa/_backend.py ]] && ls /tmp/pkg_$name/python/flashsdpa/_C*.so >/dev/null 2>&1 \
    || { tail -20 "$OUT/build_$name.log"; failed+=("build $name"); }
  step "build $name" "$(grep -c 'bytes spill stores' "$OUT/build_$name.log") spill lines, $(grep 'spill' "$OUT/build_$name.log" | grep -vc ' 0 bytes spill stores') nonzero"
done
step builds "$(( $(date +%s) - t0 )) s"
((${#failed[@]})) && finish
for name in p1 p2; do
  PYTHONPATH="/tmp/pkg_$name/python:$SITE" timed "memcheck $name" 60 memcheck_$name.log \
    compute-sanitizer --tool memcheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY scripts/dev/bwd_small.py def
done
PYTHONPATH="/tmp/pkg_p2/python:$PWD/tests:$SITE" tests "tests p2" 120 tests_p2.log $PY -m pytest -q -p no:cacheprovider -n 12 \
  tests/gpu/test_kernels.py tests/gpu/test_one_hot_grads.py
ab_rounds "base p1 p2" 60 --dims 128 64 --seqlens 2048 8192
finish
