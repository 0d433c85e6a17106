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
sanitize_subset memcheck 90 tests/gpu/test_kvcache.py
export PYTHONPATH="$SITE"
rm -rf /tmp/pkg_N && mkdir -p /tmp/pkg_N && cp -r python /tmp/pkg_N/
cp /tmp/tree_decode cuda/sm80/decode_kernel_sm80.cuh && build_copy T "128"
paged_ab "T N" 2
finish
