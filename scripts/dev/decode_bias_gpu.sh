#!/usr/bin/env bash
# decode_bias_gpu.sh: one device call for next/decode-bias-smem (the masked decode kernel's bias
# staged in shared memory with each K/V tile; kernel_notes_decode.md): narrow build (bf16 + fp16,
# d64 / d128 / d256), the masked-decode tests on both families, memcheck and racecheck on them,
# then `bench --masks` (the decode row is the one to read). Short table last; exits 1 on a failure.
#   run(command="bash scripts/dev/decode_bias_gpu.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 150 "64;128;256"
tests "masked decode" 90 md.log $PY -m pytest -q -p no:cacheprovider -n 8 tests/gpu/test_masked_decode_gpu.py \
  tests/gpu/test_masks_gpu.py -k "decode or through_sdpa"
tests "masked decode sm80" 90 md_sm80.log env FLASHSDPA_FAMILY=sm80 $PY -m pytest -q -p no:cacheprovider -n 8 \
  tests/gpu/test_masked_decode_gpu.py
for tool in memcheck racecheck; do
  timed "$tool" 120 san_$tool.log env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool $tool --error-exitcode 9 \
    --target-processes all $PY -m pytest -q -p no:cacheprovider tests/gpu/test_masked_decode_gpu.py -k "8192 and B11S and add"
done
timed "bench --masks" 90 bench_masks.log $PY -m flashsdpa bench --masks --out "$OUT/bench_masks"
echo "==== bench --masks"; grep -v "run/s\|Warning\|time_cuda" "$OUT/bench_masks.log" | tail -22
finish
