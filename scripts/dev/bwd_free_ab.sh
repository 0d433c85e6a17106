#!/usr/bin/env bash
# bwd_free_ab.sh (session 22): the flag probe's final form (no spill) against the kernel before it
# (.ab_base/: pointer semaphores, no probe), and the early free on top of it
# (-DFLASHSDPA_SM90_BWD_EARLY_FREE=1). sm90 family only, bf16 d64 + d128; memcheck of ef; 3 rounds
# alternating one process per build of bwd_ab.py. Table last.
#   run(command="bash scripts/dev/bwd_free_ab.sh", carry=[".whl"], timeout_s=400)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
rm -rf /tmp/basetree && cp -r "$PWD" /tmp/basetree && cp -r .ab_base/. /tmp/basetree/ && rm -rf /tmp/basetree/build
(cd /tmp/basetree && build_copy base "64;128" CUDAFLAGS= FLASHSDPA_FAMILIES=sm90) &
build_copy final "64;128" CUDAFLAGS= FLASHSDPA_FAMILIES=sm90 &
build_copy ef "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_EARLY_FREE=1 FLASHSDPA_FAMILIES=sm90 &
wait
for name in base final ef; do
  ls /tmp/pkg_$name/python/flashsdpa/_C*.so >/dev/null 2>&1 || { tail -20 "$OUT/build_$name.log"; failed+=("build $name"); }
done
((${#failed[@]})) && finish
PYTHONPATH="/tmp/pkg_ef/python:$SITE" timed "memcheck ef" 60 memcheck_ef.log \
  compute-sanitizer --tool memcheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY scripts/dev/bwd_small.py def
ab_rounds "base final ef" 60 --dims 128 64 --seqlens 2048 8192
finish
