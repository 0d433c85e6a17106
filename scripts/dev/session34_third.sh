#!/usr/bin/env bash
# session34_third.sh: the CTA pairs' exchange in its light form (ptx_sm90.cuh's xchg_wait /
# xchg_arrive_remote, FLASHSDPA_SM90_XCHG_LIGHT=1: CTA-scope waits, relaxed remote arrivals; the
# cluster-scope forms put CCTL.IVALL after every wait and MEMBAR.ALL.GPU before every arrival,
# which waits for the arriving thread's dQ reductions) against the cluster-scope build (=0, the
# SASS of d143f1a's kernels), forward and backward at D 512: test_hdim512 and the sanitizers on the
# light build, then 3 interleaved process rounds of hdim512_time.py (--bwd, then the forward).
#   run(command="bash scripts/dev/session34_third.sh", carry=[".whl"], timeout_s=600)
# (Historical: the switch was removed in session 35's review, the light form kept as the only one;
# rerun this script from f69d713, where FLASHSDPA_SM90_XCHG_LIGHT exists.)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
BUILD_DTYPES="bf16;fp16" build_copy light "512"
build_copy cluster "512" CUDAFLAGS=-DFLASHSDPA_SM90_XCHG_LIGHT=0
export PYTHONPATH="/tmp/pkg_light/python${SITE:+:$SITE}"
tests "hdim512 light" 120 hdim512.log $PY -m pytest tests/gpu/test_hdim512.py -q -p no:cacheprovider -n 4
for tool in memcheck racecheck synccheck; do sanitize_subset $tool 60 tests/gpu/test_hdim512.py; done
for round in 1 2 3; do
  for name in cluster light; do
    PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "$name bwd $round" 60 "${name}_bwd_$round.log" \
      $PY scripts/dev/hdim512_time.py --rounds 1 --bwd --seqlens 2048 8192
    PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "$name fwd $round" 60 "${name}_fwd_$round.log" \
      $PY scripts/dev/hdim512_time.py --rounds 1 --seqlens 2048 8192
  done
done
for round in 1 2 3; do
  for name in cluster light; do for dir in bwd fwd; do
    echo "== $name $dir round $round"; grep "^B " "$OUT/${name}_${dir}_$round.log"
  done; done
done
finish
