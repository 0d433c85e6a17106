#!/usr/bin/env bash
# session53_one.sh (session 53), one call, 4-9 minutes (as long as it is given): session 51's
# adopted kernels in the forms no GPU has run yet (fp16; the d256 forward's bias kernel) and session
# 53's exact delta of a few keys (bwd_prepost.cuh's exact_delta_store: the preprocess of every
# backward up to 16 keys). A build of bf16 + fp16 at d64 / d128 / d256, the changed kernels' test
# files (masks, mask skip, bias cells, modifiers, one-hot / tied keys, fuzz), memcheck / racecheck
# of their sanitizer subsets, a short backward benchmark, and the rest of the GPU suite while time lasts.
#   BUILD_DTYPES="bf16;fp16" bash scripts/dev/prebuild.sh full "64;128;256"   (here first: no build there)
#   run(command="bash scripts/dev/session53_one.sh", carry=[".whl", ".prebuilt"], timeout_s=590)
# LIMIT (default 590): the call's timeout_s, which the later steps' deadlines follow (a session with
# little device time left gives less and keeps the tests and sanitizers; the bench and the rest go).
# CHANGED: the test files to run first instead of the list below (a very short call: one file).
set -uo pipefail
LIMIT=${LIMIT:-590}
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_TIMEOUT=300 BUILD_DTYPES="bf16;fp16" build_copy full "64;128;256"
require_copies full
export PYTHONPATH="/tmp/pkg_full/python${SITE:+:$SITE}"
# The changed kernels' tests first (a call its device-time budget cuts keeps them), then sanitizers,
# then the rest of the suite while the time lasts.
changed=${CHANGED:-"tests/gpu/test_one_hot_grads.py tests/gpu/test_fuzz_gpu.py tests/gpu/test_masks_gpu.py tests/gpu/test_mask_skip_gpu.py tests/gpu/test_bias_cells_gpu.py tests/gpu/test_features_gpu.py"}
tests "changed kernels' tests" $(( LIMIT - 40 < 180 ? LIMIT - 40 : 180 )) tests_changed.log $PY -m pytest $changed -q -p no:cacheprovider -n 8
tail -2 "$OUT/tests_changed.log"
(( SECONDS < LIMIT - 75 )) && sanitize_subset memcheck 60 tests/gpu/test_one_hot_grads.py tests/gpu/test_masks_gpu.py tests/gpu/test_features_gpu.py
(( SECONDS < LIMIT - 75 )) && sanitize_subset racecheck 60 tests/gpu/test_one_hot_grads.py tests/gpu/test_masks_gpu.py tests/gpu/test_features_gpu.py
# The benchmark on the changed path's neighbours (the preprocess runs in every backward).
(( SECONDS < LIMIT - 75 )) && timed "bench bwd d128" 60 bench.log $PY -m flashsdpa bench --quick --head-dims 128 \
  --seqlens 1024 8192 --direction bwd --no-memory --no-overhead --no-plot --out /tmp/b53
if (( SECONDS < LIMIT - 150 )); then
  ignore=(); for f in $changed; do ignore+=(--ignore="$f"); done
  tests "rest of gpu suite" $(( LIMIT - 20 - SECONDS )) tests_rest.log $PY -m pytest tests/gpu "${ignore[@]}" -q -p no:cacheprovider -n 8 -m "not slow"
  tail -2 "$OUT/tests_rest.log"
fi
finish
