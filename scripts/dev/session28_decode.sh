#!/usr/bin/env bash
# session28_decode.sh (prepared in session 27, not yet run): decode variant 5 (make_variants.py's
# decode_kernel_v5.cuh: the copy pass straight-line, selects and one predicated block-table load;
# ptxas 13.0: 128 registers, 0 spills, SASS 8% shorter) against the tree (T), paged_probe.py, 2
# alternating rounds; the decode tests and memcheck of the decode subset on V5 first. Prediction:
# page 1024 in order 1.07 -> ~1.03x, page 64 shuffled 1.11 -> ~1.07x at B 1 x 128k (the pass's
# issue no longer waits on two branches and a constant-bank read per pass).
#   run(command="bash scripts/dev/session28_decode.sh", carry=[".whl"], timeout_s=400)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
$PY scripts/dev/ab/make_variants.py
build_copy T "128"
swap_build V5 cuda/sm80/decode_kernel_sm80.cuh /tmp/variants/decode_kernel_v5.cuh "128"
PYTHONPATH="/tmp/pkg_V5/python${SITE:+:$SITE}" tests "decode tests V5" 120 kv.log $PY -m pytest tests/gpu/test_kvcache.py -q -p no:cacheprovider -n 8
PYTHONPATH="/tmp/pkg_V5/python${SITE:+:$SITE}" sanitize_subset memcheck 90 tests/gpu/test_kvcache.py
paged_ab "T V5" 2
finish
