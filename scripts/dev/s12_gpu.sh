#!/usr/bin/env bash
# s12_gpu.sh: one device call for next/s12 (main + next/decode-bias-smem + next/bias-cells-kernel):
# narrow build (bf16 + fp16, d64 / d128 / d256), the masked-decode, mask, bias-summary and
# tile-skip GPU tests (sm90 family, then the masked decode on the portable one), memcheck on the
# decode and summary subsets, racecheck on the decode subset, the summary's timing, `bench --masks`.
# Short table last; exits 1 on a failure.
#   run(command="bash scripts/dev/s12_gpu.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 200 "64;128;256"
tests "masks + decode + summary" 150 t.log $PY -m pytest -q -p no:cacheprovider -n 8 tests/gpu/test_masked_decode_gpu.py \
  tests/gpu/test_bias_cells_gpu.py tests/gpu/test_mask_skip_gpu.py tests/gpu/test_masks_gpu.py
tests "masked decode sm80" 90 t_sm80.log env FLASHSDPA_FAMILY=sm80 $PY -m pytest -q -p no:cacheprovider -n 8 \
  tests/gpu/test_masked_decode_gpu.py
timed "memcheck decode+summary" 120 san_mem.log env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck \
  --error-exitcode 9 --target-processes all $PY -m pytest -q -p no:cacheprovider tests/gpu/test_masked_decode_gpu.py \
  tests/gpu/test_bias_cells_gpu.py -k "(8192 and B11S and add) or (test_shapes_match_the_reference and bfloat16-113) or test_every_byte_written or test_more_key_chunks"
timed "racecheck decode" 90 san_race.log env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool racecheck --kernel-name kns=flashsdpa \
  --error-exitcode 9 --target-processes all $PY -m pytest -q -p no:cacheprovider tests/gpu/test_masked_decode_gpu.py \
  -k "8192 and B11S and add"
timed "bias_cells_timing" 60 cells_timing.log $PY scripts/dev/bias_cells_timing.py
timed "bench --masks" 120 bench_masks.log $PY -m flashsdpa bench --masks --out "$OUT/bench_masks"
echo "==== bias_cells_timing"; tail -12 "$OUT/cells_timing.log"
echo "==== bench --masks"; grep -v "run/s\|Warning\|time_cuda" "$OUT/bench_masks.log" | tail -22
finish
