#!/usr/bin/env bash
# session31_fourth.sh: the d256 tile's walk rotated (StepRange::rotate: each key block starts n_block
# query blocks below the last), against the unrotated walk and against no dQ reductions at all
# (nored: timing only). session31_third.sh measured nored at 1.83x base (8k): the reductions are
# the tile's bound; with every resident key block of a head adding into the same query block's
# rows at once, the question is contention on those lines. Gradients of the rotated build checked;
# 3 alternating rounds at S 2k and 8k, causal and not.
# (Historical: the EARLY_DV, SPREAD and ROTATE switches it builds were removed at ec22d05, the
# losing variants; rerun it from e0f7aa5, where they exist. DQ_RED remains.)
#   run(command="bash scripts/dev/session31_fourth.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
declare -A FLAGS=([rot]="" [norot]="-DFLASHSDPA_SM90_BWD256_ROTATE=0" [nored]="-DFLASHSDPA_SM90_BWD256_DQ_RED=0")
for name in rot norot nored; do
  rm -rf /tmp/tree_$name /tmp/build_$name /tmp/pkg_$name && cp -r "$PWD" /tmp/tree_$name && rm -rf /tmp/tree_$name/build
  (cd /tmp/tree_$name && build_copy $name "256" CUDAFLAGS="${FLAGS[$name]}") &
done
wait
for name in rot norot nored; do
  ls /tmp/pkg_$name/python/flashsdpa/_C*.so >/dev/null 2>&1 || { tail -20 "$OUT/build_$name.log"; failed+=("build $name"); }
done
((${#failed[@]})) && finish
PYTHONPATH="/tmp/pkg_rot/python${SITE:+:$SITE}" tests "rot grads" 90 tests_rot.log \
  $PY -m pytest tests/gpu/test_kernels.py -q -p no:cacheprovider -n 8 -k "bwd256_gradients and bf16"
ab_rounds "rot norot nored" 80 --dims 256 --seqlens 2048 8192
finish
