#!/usr/bin/env bash
# session36_third.sh: the head-dim-512 forward's consumer warpgroups in turns
# (scripts/dev/ab/fwd512_pingpong.patch, applied to a copy of the tree, built with
# FLASHSDPA_SM90_FWD512_PINGPONG=1) against the tree's lockstep form. Ran in session 36 (H100): lost,
# 0.97-1.02x at 8k, 0.93-1.01x at 2k causal (kernel_notes_features.md, "Head dim 512"). The patch
# is against the tree at 332ae1d (fwd512 has gained timeline stamps and exchange parts since): run
# this script from a checkout of that commit.
# Why: ncu at 8k (H100, session36_second.sh) puts the wait for the peer's partial S at ~1/3 of the
# mainloop's stall samples, and scripts/dev/dsmem_bench.cu (H100, 66 clusters) times the exchange
# alone at ~1,820 cycles a step for both warpgroups' 16 KB (~1,430 for one), ~500 of it fixed
# latency, the same to the CTA's own slot: the transport is not the SM-to-SM network, and no other
# transport was faster (plain remote stores or loads with one release: 3,570; a bulk copy: 1,890).
# In turns, one warpgroup's exchange and softmax run under the other's S and P V GEMMs.
# Prediction: 8k non-causal +15-30% (a step ~2,300-3,300 cycles against ~4,500), causal and 2k less.
#   run(command="bash scripts/dev/session36_third.sh", carry=[".whl"], timeout_s=500)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
rm -rf /tmp/tree_pp && cp -r "$PWD" /tmp/tree_pp && rm -rf /tmp/tree_pp/build
(cd /tmp/tree_pp && patch -p1 -s < "$OLDPWD/scripts/dev/ab/fwd512_pingpong.patch") || { failed+=("patch"); finish; }
(cd /tmp/tree_pp && BUILD_DTYPES="bf16;fp16" build_copy pp "512" CUDAFLAGS=-DFLASHSDPA_SM90_FWD512_PINGPONG=1)
build_copy tree "512" CUDAFLAGS=
for name in tree pp; do
  ls /tmp/pkg_$name/python/flashsdpa/_C*.so >/dev/null 2>&1 || { tail -20 "$OUT/build_$name.log"; failed+=("build $name"); }
done
((${#failed[@]})) && finish
export PYTHONPATH="/tmp/pkg_pp/python${SITE:+:$SITE}"
tests "hdim512 pingpong" 120 hdim512.log $PY -m pytest tests/gpu/test_hdim512.py -q -p no:cacheprovider -n 4
for tool in memcheck racecheck synccheck; do sanitize_subset $tool 60 tests/gpu/test_hdim512.py; done
for round in 1 2 3; do
  for name in tree pp; do
    PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "$name fwd $round" 60 "${name}_fwd_$round.log" \
      $PY scripts/dev/hdim512_time.py --rounds 1 --seqlens 2048 8192
  done
done
for round in 1 2 3; do
  for name in tree pp; do echo "== $name fwd round $round"; grep "^B " "$OUT/${name}_fwd_$round.log"; done
done
finish
