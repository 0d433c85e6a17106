#!/usr/bin/env bash
# session54_dbias.sh (session 54), one call, ~5-7 minutes: the bias backward's dS kept in query rows
# and d_bias stored by TMA (bwd_kernel_sm90.cuh's kDsQueryRows; kernel_notes_features.md, "d_bias by
# TMA stores"), the tree's default, against the dS^T layout and store_bias_grad
# (-DFLASHSDPA_SM90_BWD_DBIAS_TMA=0: the SASS of the tree before it, every kernel).
# 1. The bias kernels' GPU tests on the tree (masks, mask skip, bias cells, modifiers), NaN-poisoned
#    d_bias included; a failure stops the call there.
# 2. ROUNDS (3) alternating process rounds of `bench --masks`, base and tree.
# 3. memcheck and racecheck on the tree: masks tests whose d_bias takes the TMA stores (Sk % 8 == 0:
#    256, 200, 136 with a box wholly past Sk), and the files' own subsets.
# 4. The rest of the GPU suite while time lasts.
# Prediction: additive bias 2k backward +10-20% (H100 ~235 -> 260-280 TFLOP/s), key padding (no
# gradient, the same kernel with d_bias null) within 1%, forwards unchanged (SASS identical).
#   BUILD_DTYPES="bf16;fp16" bash scripts/dev/prebuild.sh full "64;128;256"
#   bash scripts/dev/prebuild.sh base "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_DBIAS_TMA=0
#   run(command="bash scripts/dev/session54_dbias.sh", carry=[".whl", ".prebuilt"], timeout_s=590)
# BASE: the base build's define (default the one above). (The staged bias by TMA, session 54's second
# change, is prepared with its own script: session55_bias_load.sh.)
set -uo pipefail
LIMIT=${LIMIT:-590}
BASE=${BASE:--DFLASHSDPA_SM90_BWD_DBIAS_TMA=0}
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_TIMEOUT=300 BUILD_DTYPES="bf16;fp16" build_copy full "64;128;256"
BUILD_TIMEOUT=200 BUILD_DTYPES="bf16" build_copy base "64;128" CUDAFLAGS=$BASE
require_copies full base
pkg() { echo "/tmp/pkg_$1/python${SITE:+:$SITE}"; }
bias_tests="tests/gpu/test_masks_gpu.py tests/gpu/test_mask_skip_gpu.py tests/gpu/test_bias_cells_gpu.py tests/gpu/test_features_gpu.py"
PYTHONPATH="$(pkg full)" tests "tree: bias tests" 150 tests_bias.log $PY -m pytest $bias_tests -q -p no:cacheprovider -n 8
tail -2 "$OUT/tests_bias.log"
((${#failed[@]})) && finish
for round in $(seq 1 "${ROUNDS:-3}"); do
  for name in base full; do
    PYTHONPATH="$(pkg $name)" timed "masks $name $round" 60 "masks_${name}_$round.log" \
      $PY -m flashsdpa bench --masks --rounds 1 --out "/tmp/bm_${name}_$round"
  done
done
for round in $(seq 1 "${ROUNDS:-3}"); do
  for name in base full; do
    echo "== $name round $round"
    grep -E "^  (key padding|additive bias)" "$OUT/masks_${name}_$round.log" | cut -c1-60
  done
done | tee "$OUT/dbias_ab.txt"
for tool in memcheck racecheck; do
  (( SECONDS < LIMIT - 90 )) || break
  PYTHONPATH="$(pkg full)" SAN_K="sanitizer_subset or (through_sdpa and add and 1HSS) or (fully_masked_rows and add and 200) or (bias_layouts and 136 and 128)" \
    sanitize_subset $tool 75 tests/gpu/test_masks_gpu.py
done
if (( SECONDS < LIMIT - 120 )); then
  ignore=(); for f in $bias_tests; do ignore+=(--ignore="$f"); done
  PYTHONPATH="$(pkg full)" tests "rest of gpu suite" $(( LIMIT - 20 - SECONDS )) tests_rest.log \
    $PY -m pytest tests/gpu "${ignore[@]}" -q -p no:cacheprovider -n 8 -m "not slow"
  tail -2 "$OUT/tests_rest.log"
fi
finish
