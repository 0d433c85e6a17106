#!/usr/bin/env bash
# session52_dbias.sh (prepared in session 51: compiled only), one call, ~5 minutes: the bias
# backward's d_bias read back with ldmatrix.x4.trans (-DFLASHSDPA_SM90_BWD_DBIAS_LDSM=1:
# store_bias_grad; kernel_notes_features.md, "d_bias read back with ldmatrix") against the tree, bf16
# d64 / d128. The tree's side is session53_one.sh's build (`full`: bf16 + fp16 d64 / d128 / d256,
# whose bf16 d128 bias kernels are a bf16-only build's), taken as it is on a machine warm from that
# script, else carried or built (session 52). Default 0: every kernel's SASS byte-identical; with
# it only the four bias kernels (bf16 / fp16, d64 / d128) change; ptxas 13.0 0 spills; the map checked on the host
# (scripts/dev/ldsm_map_check.py: every in-bounds d_bias element once, its own dS^T value).
# 1. The variant's GPU tests (masks, bias cells, mask skip: the d_bias tiles inside and at the edges
#    of both sequences), NaN-poisoned outputs included.
# 2. ROUNDS (3) alternating process rounds of `bench --masks` on the tree (full) and the variant.
# 3. memcheck and racecheck on the variant, of masks tests whose d_bias rows take store_bias_grad.
# Prediction: additive bias 2k backward +0-3% (~40 fewer instructions a thread a step, in the dQ
# GEMM's shadow), key padding unchanged (no gradient), forwards unchanged.
#   bash scripts/dev/prebuild.sh ldsm "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_DBIAS_LDSM=1   (here first,
#   and prebuild.sh full as session53_one.sh says where this call comes first)
#   run(command="bash scripts/dev/session52_dbias.sh", carry=[".whl", ".prebuilt"], timeout_s=420)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
if ! ls /tmp/pkg_full/python/flashsdpa/_C*.so >/dev/null 2>&1; then
  BUILD_TIMEOUT=300 BUILD_DTYPES="bf16;fp16" build_copy full "64;128;256"
fi
BUILD_DTYPES="bf16" build_copy ldsm "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_DBIAS_LDSM=1
require_copies full ldsm
pkg() { echo "/tmp/pkg_$1/python${SITE:+:$SITE}"; }
PYTHONPATH="$(pkg ldsm)" tests "ldsm: bias tests" 150 tests_ldsm.log $PY -m pytest tests/gpu/test_masks_gpu.py \
  tests/gpu/test_mask_skip_gpu.py tests/gpu/test_bias_cells_gpu.py -q -p no:cacheprovider -n 8
((${#failed[@]})) && finish
for round in $(seq 1 "${ROUNDS:-3}"); do
  for name in full ldsm; do
    PYTHONPATH="$(pkg $name)" timed "masks $name $round" 60 "masks_${name}_$round.log" \
      $PY -m flashsdpa bench --masks --rounds 1 --out "/tmp/bm_${name}_$round"
  done
done
for round in $(seq 1 "${ROUNDS:-3}"); do
  for name in full ldsm; do
    echo "== $name round $round"
    grep -E "^  (key padding|additive bias)" "$OUT/masks_${name}_$round.log" | cut -c1-60
  done
done | tee "$OUT/dbias_ab.txt"
# The masks file's own sanitizer subset has Sk = 113 and 7 (d_bias rows not 16-byte aligned: the
# scattered road); these have aligned rows, whole tiles (256) and edge tiles (200).
for tool in memcheck racecheck; do
  PYTHONPATH="$(pkg ldsm)" SAN_K="(through_sdpa and add and 1HSS) or (fully_masked_rows and add and 200)" \
    sanitize_subset $tool 90 tests/gpu/test_masks_gpu.py
done
finish
