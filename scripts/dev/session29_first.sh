#!/usr/bin/env bash
# session29_first.sh (run twice: the second with P^T in shared memory): the d64 backward's tall step (BwdTraitsSm90::kTall: 128-query steps, dQ split
# by rows, 128-row dQ semaphores) on the H200: the whole GPU suite on a bf16 + fp16 d64 / d128 build
# of it, memcheck and racecheck of test_kernels' sanitizer subset (san_tall64 added), memcheck of a
# deterministic backward, then 3 alternating rounds of the whole backward against the same tree
# built with -DFLASHSDPA_SM90_BWD_TALL64=0 (the 64-row d64 kernel, byte-identical to main's).
#   run(command="bash scripts/dev/session29_first.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
rm -rf /tmp/basetree && cp -r "$PWD" /tmp/basetree && rm -rf /tmp/basetree/build
(cd /tmp/basetree && BUILD_DTYPES="bf16;fp16" build_copy base "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_TALL64=0 FLASHSDPA_FAMILIES=sm90) &
BUILD_DTYPES="bf16;fp16" build_copy tall "64;128" CUDAFLAGS=
wait
for name in base tall; do
  ls /tmp/pkg_$name/python/flashsdpa/_C*.so >/dev/null 2>&1 || { tail -20 "$OUT/build_$name.log"; failed+=("build $name"); }
done
((${#failed[@]})) && finish
grep -A2 "bwd_sm90_kernel.*Li64ELi2ELNS_8ModsKindE0ELb0E" "$OUT/build_tall.log" | grep -E "spill|registers" | head -4
export PYTHONPATH="/tmp/pkg_tall/python${SITE:+:$SITE}"
tests "gpu tests (tall)" 240 tests.log $PY -m pytest tests/gpu -q -p no:cacheprovider -n 8
sanitize_subset memcheck 100 tests/gpu/test_kernels.py
sanitize_subset racecheck 120 tests/gpu/test_kernels.py
timed "memcheck det" 60 memcheck_det.log compute-sanitizer --tool memcheck --kernel-name kns=flashsdpa \
  --error-exitcode 1 $PY scripts/dev/bwd_small.py det --dims 64
export PYTHONPATH="$SITE"
ab_rounds "base tall" 90 --dims 64 --seqlens 512 1024 2048 8192
finish
