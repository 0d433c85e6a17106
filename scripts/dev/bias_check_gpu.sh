#!/usr/bin/env bash
# bias_check_gpu.sh: after bias_fwd_gpu.sh found an illegal address (a backward key block with no
# step staged step 0 at m_block -1) and a racecheck crash: the mask tests, then racecheck and
# memcheck on single calls (bias_race.py), forward and backward apart, both copy paths.
#   run(command="bash scripts/dev/bias_check_gpu.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 200 "64;128;256"
tests "masks sm90" 150 t.log $PY -m pytest -q -p no:cacheprovider -n 8 tests/gpu/test_masks_gpu.py \
  tests/gpu/test_mask_skip_gpu.py tests/gpu/test_bias_cells_gpu.py tests/gpu/test_features_gpu.py
for tool in racecheck memcheck; do
  for c in "fwd 120 128" "fwd 114 128 offset" "fwd 120 64" "bwd 120 128" "bwd 114 128 offset" "bwd 120 64"; do
    timed "$tool $c" 60 "san_${tool}_${c// /_}.log" env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool $tool \
      --kernel-name kns=flashsdpa --error-exitcode 9 $PY scripts/dev/bias_race.py $c
  done
done
for f in "$OUT"/san_racecheck_*.log; do grep -E "Error|error|hazard|Hazard" "$f" | head -4 | sed "s|^|$(basename $f): |"; done
finish
