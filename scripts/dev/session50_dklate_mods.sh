#!/usr/bin/env bash
# session50_dklate_mods.sh (session 50), one call, ~5 minutes: the sm90 backward's modifier kernels
# (softcap / ALiBi / sinks, and the bias) with dK late as the plain d128 kernel has it
# (-DFLASHSDPA_SM90_BWD_DKLATE_MODS=1; default 0: every other kernel's SASS byte-identical,
# sass_hashes.py; ptxas 13.0: 0 spills, no C75xx, bf16 / fp16 d64 / d128).
# 1. Tree (t0) and variant (dk), bf16 d64 / d128. The variant: the features' and masks' GPU tests
#    (softcap, ALiBi, sinks, the bias with gradients, deterministic mode, NaN-poisoned outputs);
#    racecheck of both files' sanitizer subsets last (after the timing, so that a short call
#    still times).
# 2. ROUNDS (3) alternating process rounds: features_timing.py (plain and softcap 50, d128 8k) and
#    `bench --masks` (the bias and key-padding rows).
# Prediction (kernel_notes_features.md, "dK late in the modifier kernels"): softcap 50 backward
# 74-78% -> 76-82% of plain, the bias 2k backward +2-5%; forwards unchanged (no forward kernel
# changes), key padding's backward (the bias kernel) +0-3%.
#   run(command="bash scripts/dev/session50_dklate_mods.sh", carry=[".whl"], timeout_s=420)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16" build_copy t0 "64;128"
BUILD_DTYPES="bf16" build_copy dk "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_DKLATE_MODS=1
require_copies t0 dk
V="/tmp/pkg_dk/python${SITE:+:$SITE}"
PYTHONPATH="$V" tests "dk: features + masks tests" 150 tests_dk.log $PY -m pytest tests/gpu/test_features_gpu.py \
  tests/gpu/test_masks_gpu.py -q -p no:cacheprovider -n 8
((${#failed[@]})) && finish
for round in $(seq 1 "${ROUNDS:-3}"); do
  for name in t0 dk; do
    PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "timing $name $round" 60 "timing_${name}_$round.log" \
      $PY scripts/dev/features_timing.py --variants plain "softcap 50"
    PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "masks $name $round" 60 "masks_${name}_$round.log" \
      $PY -m flashsdpa bench --masks --rounds 1 --out "/tmp/bm_${name}_$round"
  done
done
for round in $(seq 1 "${ROUNDS:-3}"); do
  for name in t0 dk; do
    echo "== $name round $round"
    grep -iE "softcap|plain" "$OUT/timing_${name}_$round.log" | head -4
    grep -E "^  (key padding S 2k|additive bias)" "$OUT/masks_${name}_$round.log" | cut -c1-60
  done
done | tee "$OUT/dklate.txt"
PYTHONPATH="$V" SAN_K="sanitizer_subset" sanitize_subset racecheck 90 tests/gpu/test_features_gpu.py tests/gpu/test_masks_gpu.py
finish
