#!/usr/bin/env bash
# bias_fwd_gpu.sh: one device call for the sm90 staged bias, forward and backward (kernel_notes_features.md,
# "The sm90 forward's bias staged one key block ahead"): narrow build (bf16 + fp16, d64 / d128 /
# d256), the mask, tile-skip and bias-summary GPU tests (sm90 family), the layout test on the
# portable family, memcheck / racecheck (our kernels) on a layout subset, bias_profile.py,
# `bench --masks`. Short table last; exits 1 on a failure.
#   run(command="bash scripts/dev/bias_fwd_gpu.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 200 "64;128;256"
tests "masks sm90" 150 t.log $PY -m pytest -q -p no:cacheprovider -n 8 tests/gpu/test_masks_gpu.py \
  tests/gpu/test_mask_skip_gpu.py tests/gpu/test_bias_cells_gpu.py tests/gpu/test_features_gpu.py
tests "layouts sm80" 60 t_sm80.log env FLASHSDPA_FAMILY=sm80 $PY -m pytest -q -p no:cacheprovider -n 8 \
  tests/gpu/test_masks_gpu.py -k "bias_layouts"
K="bias_layouts and 128 and (114 or 1001 or offset)"
for tool in memcheck racecheck; do
  timed "$tool layouts" 100 san_$tool.log env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool $tool \
    --kernel-name kns=flashsdpa --error-exitcode 9 --target-processes all $PY -m pytest -q -p no:cacheprovider \
    tests/gpu/test_masks_gpu.py -k "$K"
done
timed "bias_profile" 60 prof.log $PY scripts/dev/bias_profile.py
timed "bench --masks" 120 bench_masks.log $PY -m flashsdpa bench --masks --out "$OUT/bench_masks"
echo "==== bias_profile"; head -7 "$OUT/prof.log"
echo "==== bench --masks"; grep -v "run/s\|Warning\|time_cuda\|No available kernel" "$OUT/bench_masks.log" | tail -26
finish
