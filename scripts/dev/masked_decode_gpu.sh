#!/usr/bin/env bash
# masked_decode_gpu.sh: one device call for the sm80-forced masked-decode failure (session 11):
# narrow build, masked_decode_debug.py under both families, the masked-decode / decode-sized /
# fallback tests (default and FLASHSDPA_FAMILY=sm80), compute-sanitizer initcheck + memcheck on
# the two failing nodes under sm80, and the d64 backward tests (kvregs merged). Short table last.
#   run(command="bash scripts/dev/masked_decode_gpu.sh", carry=[".whl"], timeout_s=400)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 150 "64;128"
timed "debug default" 40 debug_default.log $PY scripts/dev/masked_decode_debug.py
timed "debug sm80" 40 debug_sm80.log env FLASHSDPA_FAMILY=sm80 $PY scripts/dev/masked_decode_debug.py
NODES="tests/gpu/test_masked_decode_gpu.py::test_masked_decode_through_sdpa[1-7-B11S-bool] tests/gpu/test_masked_decode_gpu.py::test_masked_decode_through_sdpa[1-113-B11S-bool]"
tests "fixed tests" 90 fixed.log $PY -m pytest -q -p no:cacheprovider -n 8 tests/gpu/test_masked_decode_gpu.py \
  tests/gpu/test_cxx_routers.py tests/gpu/test_sdpa.py::test_unsupported_calls_fall_back \
  "tests/gpu/test_masks_gpu.py::test_decode_sized_masked_sdpa_takes_the_decode_kernel"
tests "sm80 nodes alone" 60 nodes_sm80.log env FLASHSDPA_FAMILY=sm80 $PY -m pytest -q -p no:cacheprovider $NODES
tests "sm80 masked decode" 60 md_sm80.log env FLASHSDPA_FAMILY=sm80 $PY -m pytest -q -p no:cacheprovider -n 8 tests/gpu/test_masked_decode_gpu.py
for tool in initcheck memcheck; do
  timed "sanitizer $tool" 90 san_$tool.log env FLASHSDPA_FAMILY=sm80 PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool $tool \
    --error-exitcode 9 --target-processes all $PY -m pytest -q -p no:cacheprovider $NODES
done
tests "bwd d64 (kvregs)" 120 bwd64.log $PY -m pytest -q -p no:cacheprovider -n 8 tests/gpu/test_kernels.py tests/gpu/test_dropout_gpu.py -k "64"
echo "==== debug"; cat "$OUT/debug_default.log" "$OUT/debug_sm80.log" | cut -c1-200
grep -E "^E  .*(Error|max\|)" "$OUT/md_sm80.log" | head -8
grep -E "Uninitialized|Invalid|ERROR SUMMARY" "$OUT"/san_*.log | sort | uniq -c | head -12
finish
