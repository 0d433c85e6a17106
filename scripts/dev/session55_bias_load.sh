#!/usr/bin/env bash
# session55_bias_load.sh (prepared in session 54: compiled only), one call, ~3-6 minutes: the bias
# backward's staged bias by TMA (-DFLASHSDPA_SM90_BWD_BIAS_TMA_LOAD=1, kBiasTmaLoad;
# kernel_notes_features.md, "The staged bias by TMA") against the tree (its default 0: the warps'
# cp.async copies, with session 54's d_bias TMA stores).
# 1. The variant's bias tests (masks with the NaN-poisoned d_bias, mask skip, bias cells, modifiers:
#    bf16 + fp16, d64 / d128); a failure stops the call there.
# 2. ROUNDS (3) alternating process rounds of `bench --masks`, tree and variant.
# 3. memcheck and racecheck on the variant: masks tests whose bias takes the TMA loads (a (1, H, S, S)
#    bias through SDPA, (S, S), contiguous and padded-row layouts) and the files' own subsets (key
#    padding: the copies).
# 4. `bench --features` on the tree (the part session 54 added: issue 14's dropout and softcap bars).
# 5. The rest of the GPU suite on the tree while time lasts (LIMIT).
# Prediction: additive bias 2k backward +3-6% (H100 ~291 -> 300-308 TFLOP/s), key padding within 1%.
#   BUILD_DTYPES="bf16;fp16" bash scripts/dev/prebuild.sh full "64;128;256"
#   BUILD_DTYPES="bf16;fp16" bash scripts/dev/prebuild.sh tmaload "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_BIAS_TMA_LOAD=1
#   run(command="bash scripts/dev/session55_bias_load.sh", carry=[".whl", ".prebuilt"], timeout_s=420)
# NAME / VARIANT: another variant of the bias kernel (its CUDAFLAGS) against the tree. (Session 54's
# A/B of the d_bias TMA stores was scripts/dev/session54_dbias.sh, in history at 898e20c; its losing
# side is scripts/dev/ab/bias_grad_rows.patch.)
set -uo pipefail
LIMIT=${LIMIT:-420}
NAME=${NAME:-tmaload}
VARIANT=${VARIANT:--DFLASHSDPA_SM90_BWD_BIAS_TMA_LOAD=1}
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_TIMEOUT=300 BUILD_DTYPES="bf16;fp16" build_copy full "64;128;256"
BUILD_TIMEOUT=200 BUILD_DTYPES="bf16;fp16" build_copy "$NAME" "64;128" CUDAFLAGS="$VARIANT"
require_copies full "$NAME"
pkg() { echo "/tmp/pkg_$1/python${SITE:+:$SITE}"; }
bias_tests="tests/gpu/test_masks_gpu.py tests/gpu/test_mask_skip_gpu.py tests/gpu/test_bias_cells_gpu.py tests/gpu/test_features_gpu.py"
PYTHONPATH="$(pkg "$NAME")" tests "$NAME: bias tests" 150 tests_bias.log $PY -m pytest $bias_tests -q -p no:cacheprovider -n 8
tail -2 "$OUT/tests_bias.log"
((${#failed[@]})) && finish
for round in $(seq 1 "${ROUNDS:-3}"); do
  for name in full "$NAME"; do
    PYTHONPATH="$(pkg $name)" timed "masks $name $round" 60 "masks_${name}_$round.log" \
      $PY -m flashsdpa bench --masks --rounds 1 --out "/tmp/bm_${name}_$round"
  done
done
for round in $(seq 1 "${ROUNDS:-3}"); do
  for name in full "$NAME"; do
    echo "== $name round $round"
    grep -E "^  (key padding|additive bias)" "$OUT/masks_${name}_$round.log" | cut -c1-60
  done
done | tee "$OUT/bias_load_ab.txt"
# The benchmark's new features part (session 54: dropout 0.1 S 4k, softcap 50 S 8k; never run on a GPU).
PYTHONPATH="$(pkg full)" timed "bench features" 90 features.log $PY -m flashsdpa bench --features --rounds 3 \
  --out /tmp/b_features
tail -16 "$OUT/features.log"
for tool in memcheck racecheck; do
  (( SECONDS < LIMIT - 60 )) || break
  PYTHONPATH="$(pkg "$NAME")" SAN_K="sanitizer_subset or (through_sdpa and add and 1HSS) or (fully_masked_rows and add and 200) or (bias_layouts and 128 and full)" \
    sanitize_subset $tool 75 tests/gpu/test_masks_gpu.py
done
if (( SECONDS < LIMIT - 120 )); then
  ignore=(); for f in $bias_tests; do ignore+=(--ignore="$f"); done
  PYTHONPATH="$(pkg full)" tests "rest of gpu suite" $(( LIMIT - 20 - SECONDS )) tests_rest.log \
    $PY -m pytest tests/gpu "${ignore[@]}" -q -p no:cacheprovider -n 8 -m "not slow"
  tail -2 "$OUT/tests_rest.log"
fi
finish
