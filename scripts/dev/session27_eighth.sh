#!/usr/bin/env bash
# session27_eighth.sh: decode variant 4 (N: the tile's block-table entries loaded before its
# copies, back to back) against session 26's kernel (T: the per-pass lookup inside the pass's
# branches), paged_probe.py, 2 alternating rounds; the decode tests and memcheck of the decode
# subset on N. As run in session 27 N was the tree and T the copy (the variant lost, so the tree
# went back to T); it now swaps make_variants.py's decode_kernel_v4.cuh in for N, T being the tree.
#   run(command="bash scripts/dev/session27_eighth.sh", carry=[".whl"], timeout_s=480)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
$PY scripts/dev/ab/make_variants.py
cp cuda/sm80/decode_kernel_sm80.cuh /tmp/tree_decode && cp /tmp/variants/decode_kernel_v4.cuh cuda/sm80/decode_kernel_sm80.cuh
narrow_build 170 "64;128"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
tests "decode tests" 120 kv.log $PY -m pytest tests/gpu/test_kvcache.py -q -p no:cacheprovider -n 8
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timed "memcheck decode" 90 san_kv.log compute-sanitizer --tool memcheck --error-exitcode 9 \
  --target-processes all $PY -m pytest tests/gpu/test_kvcache.py -q -x -p no:cacheprovider -k sanitizer_subset
export PYTHONPATH="$SITE"
rm -rf /tmp/pkg_N && mkdir -p /tmp/pkg_N && cp -r python /tmp/pkg_N/
cp /tmp/tree_decode cuda/sm80/decode_kernel_sm80.cuh && build_copy T "128"
for round in 1 2; do
  for name in T N; do
    PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "probe $name $round" 40 probe_${name}_$round.log $PY scripts/dev/paged_probe.py --pages 16 64 1024
  done
done
(cd "$OUT" && paste -d'|' probe_T_1.log probe_N_1.log && paste -d'|' probe_T_2.log probe_N_2.log)
finish
