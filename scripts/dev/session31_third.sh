#!/usr/bin/env bash
# session31_third.sh: the d256 tile's A/B (session31_second.sh's lost its variant builds: a stale
# build directory from another tree). Four builds, each in a tree and build directory of its own:
# base, nored (no dQ reductions: timing only, dQ wrong), earlydv (dV after a barrier on P^T alone),
# spread (the dQ reductions in 4 parts over the next step); earlydv's and spread's gradients
# checked, then 3 alternating rounds of the whole backward at 8k, causal and not.
# (Historical: the EARLY_DV, SPREAD and ROTATE switches it builds were removed at ec22d05, the
# losing variants; rerun it from e0f7aa5, where they exist. DQ_RED remains.)
#   run(command="bash scripts/dev/session31_third.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
declare -A FLAGS=([base]="" [nored]="-DFLASHSDPA_SM90_BWD256_DQ_RED=0" [earlydv]="-DFLASHSDPA_SM90_BWD256_EARLY_DV=1"
                  [spread]="-DFLASHSDPA_SM90_BWD256_SPREAD=1")
for name in base nored earlydv spread; do
  rm -rf /tmp/tree_$name /tmp/build_$name /tmp/pkg_$name && cp -r "$PWD" /tmp/tree_$name && rm -rf /tmp/tree_$name/build
  (cd /tmp/tree_$name && build_copy $name "256" CUDAFLAGS="${FLAGS[$name]}") &
done
wait
for name in base nored earlydv spread; do
  grep -A2 "Li256ELi2ELNS_8ModsKindE0ELb0E" "$OUT/build_$name.log" | grep -E "spill|Used" | head -2
  ls /tmp/pkg_$name/python/flashsdpa/_C*.so >/dev/null 2>&1 || { tail -20 "$OUT/build_$name.log"; failed+=("build $name"); }
done
((${#failed[@]})) && finish
for name in earlydv spread; do
  PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" tests "$name grads" 90 tests_$name.log \
    $PY -m pytest tests/gpu/test_kernels.py -q -p no:cacheprovider -n 8 -k "bwd256_gradients and bf16"
done
ab_rounds "base nored earlydv spread" 60 --dims 256 --seqlens 8192
finish
