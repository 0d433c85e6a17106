#!/usr/bin/env bash
# session51_mods.sh (prepared in session 50: compiled only; ran in session 51, both variants won and
# became the default, their defines removed: on a later tree the three builds are the same), one
# call, ~6-7 minutes: two dev defines
# for the modifier kernels, each in its own build against the tree (t0), bf16 d64 / d128:
# - dk: dK late in the sm90 backward's modifier kernels (-DFLASHSDPA_SM90_BWD_DKLATE_MODS=1:
#   softcap / ALiBi / sinks and the bias; kernel_notes_features.md, "dK late in the modifier kernels").
# - lean: the bias path with fewer instructions (-DFLASHSDPA_BIAS_LEAN=1: ldmatrix reads, the
#   staging copies and the backward's gradient rows with their addresses strength-reduced; same
#   notes, "The staged bias with fewer instructions").
# Both: default 0, every kernel's SASS byte-identical; with them only the kernels named change,
# ptxas 13.0 0 spills, no C75xx.
# 1. The variants' GPU tests (dk: features + masks; lean: masks, mask skip, bias cells, masked decode),
#    NaN-poisoned outputs included.
# 2. ROUNDS (3) alternating process rounds: features_timing.py (plain and softcap 50, d128 8k) on t0
#    and dk, `bench --masks` on all three.
# 3. racecheck of the sanitizer subsets on both variants (last, so that a short call still times).
# Predictions: dk: softcap 50 backward 74-78% -> 76-82% of plain, bias 2k backward +2-5%, key
# padding's backward +0-3%, forwards unchanged; lean: bias 2k forward +4-12%, key padding's forward
# +1-5%, bias backward +1-4%.
#   run(command="bash scripts/dev/session51_mods.sh", carry=[".whl"], timeout_s=480)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16" build_copy t0 "64;128"
BUILD_DTYPES="bf16" build_copy dk "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_DKLATE_MODS=1
BUILD_DTYPES="bf16" build_copy lean "64;128" CUDAFLAGS=-DFLASHSDPA_BIAS_LEAN=1
require_copies t0 dk lean
pkg() { echo "/tmp/pkg_$1/python${SITE:+:$SITE}"; }
PYTHONPATH="$(pkg dk)" tests "dk: features + masks tests" 150 tests_dk.log $PY -m pytest tests/gpu/test_features_gpu.py \
  tests/gpu/test_masks_gpu.py -q -p no:cacheprovider -n 8
PYTHONPATH="$(pkg lean)" tests "lean: bias tests" 150 tests_lean.log $PY -m pytest tests/gpu/test_masks_gpu.py \
  tests/gpu/test_mask_skip_gpu.py tests/gpu/test_bias_cells_gpu.py tests/gpu/test_masked_decode_gpu.py \
  -q -p no:cacheprovider -n 8
((${#failed[@]})) && finish
for round in $(seq 1 "${ROUNDS:-3}"); do
  for name in t0 dk lean; do
    if [[ $name != lean ]]; then
      PYTHONPATH="$(pkg $name)" timed "timing $name $round" 60 "timing_${name}_$round.log" \
        $PY scripts/dev/features_timing.py --variants plain "softcap 50"
    fi
    PYTHONPATH="$(pkg $name)" timed "masks $name $round" 60 "masks_${name}_$round.log" \
      $PY -m flashsdpa bench --masks --rounds 1 --out "/tmp/bm_${name}_$round"
  done
done
for round in $(seq 1 "${ROUNDS:-3}"); do
  for name in t0 dk lean; do
    echo "== $name round $round"
    [[ -f "$OUT/timing_${name}_$round.log" ]] && grep -iE "softcap|plain" "$OUT/timing_${name}_$round.log" | head -4
    grep -E "^  (key padding|additive bias)" "$OUT/masks_${name}_$round.log" | cut -c1-60
  done
done | tee "$OUT/mods_ab.txt"
for name in dk lean; do
  PYTHONPATH="$(pkg $name)" SAN_K="sanitizer_subset" sanitize_subset racecheck 90 tests/gpu/test_features_gpu.py \
    tests/gpu/test_masks_gpu.py
done
finish
