#!/usr/bin/env bash
# session26_third.sh: A/B of the decode kernel's block-table prefetch (A: HEAD's kernel, B: the
# prefetch), paged_probe.py on each (ordered and shuffled pools of pages 16-1024 against the
# contiguous cache, CUDA-graph GPU time), alternating twice. (scripts/dev/ab/decode_kernel_sm80_head.cuh
# was 1c88e67's cuda/sm80/decode_kernel_sm80.cuh, removed after the run: git show restores it.)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
cp cuda/sm80/decode_kernel_sm80.cuh /tmp/decode_new.cuh
cp scripts/dev/ab/decode_kernel_sm80_head.cuh cuda/sm80/decode_kernel_sm80.cuh
build_copy A "128"
cp /tmp/decode_new.cuh cuda/sm80/decode_kernel_sm80.cuh
build_copy B "128"
for round in 1 2; do
  for name in A B; do
    PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "probe $name $round" 90 probe_${name}_$round.log $PY scripts/dev/paged_probe.py
  done
done
paste probe_A_1.log probe_B_1.log 2>/dev/null
cd "$OUT" && paste -d'|' probe_A_1.log probe_B_1.log && paste -d'|' probe_A_2.log probe_B_2.log
cd - >/dev/null
finish
