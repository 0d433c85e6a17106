#!/usr/bin/env bash
# session27_ninth.sh: the d64 short tile at 64 rows, two CTAs an SM (S: make_variants.py's
# fwd_kernel_sm90_short64.cuh and fwd_launch_sm90_short64.cuh; as run in session 27 the tree held
# the one-consumer support, which was then moved into the variant) against
# the tree's 128 rows (T), FLASHSDPA_FAMILY=sm90 (no speed rule: the short tile wherever
# fwd_sm90_short_tile picks it), small_graph_times.py --dims 64 --check, 2 alternating rounds;
# test_kernels.py on S first (its d64 shapes the rule keeps on sm90 run the 64-row tile).
#   run(command="bash scripts/dev/session27_ninth.sh", carry=[".whl"], timeout_s=300)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
$PY scripts/dev/ab/make_variants.py
build_copy T "64"
swap_build S cuda/sm90/fwd_kernel_sm90.cuh /tmp/variants/fwd_kernel_sm90_short64.cuh "64" \
  cuda/sm90/fwd_launch_sm90.cuh /tmp/variants/fwd_launch_sm90_short64.cuh
grep -A3 "Li64ELi64ELi128" "$OUT/build_S.log" | grep -E "spill|registers" | head -2
PYTHONPATH="/tmp/pkg_S/python${SITE:+:$SITE}" tests "kernels on S" 90 tests_S.log $PY -m pytest tests/gpu/test_kernels.py -q -p no:cacheprovider -n 8
for round in 1 2; do
  for name in T S; do
    PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" FLASHSDPA_FAMILY=sm90 timed "graph $name $round" 40 g_${name}_$round.log \
      $PY scripts/dev/small_graph_times.py --only-ours --dims 64 --rounds 9 --check
  done
done
(cd "$OUT" && paste -d' ' <(grep -E "^ *[0-9]" g_T_1.log) <(grep -E "^ *[0-9]" g_S_1.log | awk '{print $NF}') \
  <(grep -E "^ *[0-9]" g_T_2.log | awk '{print $NF}') <(grep -E "^ *[0-9]" g_S_2.log | awk '{print $NF}'))
grep -h "FAIL" "$OUT"/g_*.log
finish
