#!/usr/bin/env bash
# session26_fifth.sh: (1) the refined forward speed rule (tiles_sm90.cu's fwd_sm90_yields: <= 2
# waves of sm90 tiles, or causal <= 256 keys): test_kernels / test_sdpa / test_training on a d64 /
# d128 build, small_graph_times.py's ours-only table with the rule on; (2) A/B of two variants
# (scripts/dev/ab/make_variants.py writes them; swapped in for their builds): V, the decode kernel's page ids one tile ahead
# with shift and mask, against the tree (paged_probe.py); M, the sm90 d64 forward on 128-row tiles
# against the tree's 192 (small_graph_times.py --dims 64, speed rules off). 2 alternating rounds.
#   run(command="bash scripts/dev/session26_fifth.sh", carry=[".whl"], timeout_s=480)
# Session 26 ran it with 189 s of device time left: it ended in the second round, and of its 12
# files only 8 came back (out.tgz is made by finish, which never ran): the tests' log, the summary
# and variant 3's probe among the lost. Run it with >= 400 s, or pack_out after each part.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
narrow_build 150 "64;128"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
tests "gpu tests" 120 tests.log $PY -m pytest tests/gpu/test_kernels.py tests/gpu/test_sdpa.py tests/gpu/test_training.py -q -p no:cacheprovider -n 8
timed "graph times" 60 graph.log $PY scripts/dev/small_graph_times.py --only-ours
grep -E "^ *[0-9]|GPU us|^  B" "$OUT/graph.log"
export PYTHONPATH="$SITE"
rm -rf /tmp/pkg_T && mkdir -p /tmp/pkg_T && cp -r python /tmp/pkg_T/
$PY scripts/dev/ab/make_variants.py
swap_build V cuda/sm80/decode_kernel_sm80.cuh /tmp/variants/decode_kernel_v3.cuh "128"
swap_build M cuda/sm90/fwd_kernel_sm90.cuh /tmp/variants/fwd_kernel_sm90_d64m128.cuh "64"
for round in 1 2; do
  for name in T V; do
    PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "probe $name $round" 40 probe_${name}_$round.log $PY scripts/dev/paged_probe.py --pages 16 64 1024
  done
  for name in T M; do
    PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" FLASHSDPA_SPEED_RULES=0 timed "d64 graph $name $round" 40 g64_${name}_$round.log \
      $PY scripts/dev/small_graph_times.py --only-ours --dims 64 --rounds 9 --check
  done
done
(cd "$OUT" && paste -d'|' probe_T_1.log probe_V_1.log && paste -d'|' probe_T_2.log probe_V_2.log)
(cd "$OUT" && paste -d' ' g64_T_1.log <(awk '{print $NF}' g64_M_1.log) <(awk '{print $NF}' g64_T_2.log) <(awk '{print $NF}' g64_M_2.log) | grep -E "^ *[0-9]")
finish
