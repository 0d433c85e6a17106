#!/usr/bin/env bash
# session52_one.sh (session 52), one call, 4-9 minutes (as long as it is given): session 51's
# adopted kernels (dK late in the modifier kernels, the lean staged bias) in the forms no GPU has
# run yet: fp16, and the d256 forward's bias kernel (6,984 -> 6,832 SASS instructions). A build of bf16 + fp16 at d64 / d128 /
# d256 (the buckets those kernels live in; session48_full.sh's seven buckets take ~5 minutes more
# than a session 52 with ~20 minutes of device time could give), the changed kernels' test files
# (masks, mask skip, bias cells, modifiers), memcheck / racecheck of the masks' and the modifiers'
# sanitizer subsets (fp16 and d256 rows included), and the rest of the GPU suite while time lasts.
#   BUILD_DTYPES="bf16;fp16" bash scripts/dev/prebuild.sh full "64;128;256"   (here first: no build there)
#   run(command="bash scripts/dev/session52_one.sh", carry=[".whl", ".prebuilt"], timeout_s=590)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_TIMEOUT=300 BUILD_DTYPES="bf16;fp16" build_copy full "64;128;256"
require_copies full
export PYTHONPATH="/tmp/pkg_full/python${SITE:+:$SITE}"
# The changed kernels' tests first (a call its device-time budget cuts keeps them), then sanitizers,
# then the rest of the suite while the time lasts.
changed="tests/gpu/test_masks_gpu.py tests/gpu/test_mask_skip_gpu.py tests/gpu/test_bias_cells_gpu.py tests/gpu/test_features_gpu.py"
tests "changed kernels' tests" 150 tests_changed.log $PY -m pytest $changed -q -p no:cacheprovider -n 8
tail -2 "$OUT/tests_changed.log"
(( SECONDS < 330 )) && sanitize_subset memcheck 50 tests/gpu/test_masks_gpu.py tests/gpu/test_features_gpu.py
(( SECONDS < 380 )) && sanitize_subset racecheck 50 tests/gpu/test_masks_gpu.py tests/gpu/test_features_gpu.py
if (( SECONDS < 400 )); then
  ignore=(); for f in $changed; do ignore+=(--ignore="$f"); done
  tests "rest of gpu suite" $(( 570 - SECONDS )) tests_rest.log $PY -m pytest tests/gpu "${ignore[@]}" -q -p no:cacheprovider -n 8 -m "not slow"
  tail -2 "$OUT/tests_rest.log"
fi
finish
