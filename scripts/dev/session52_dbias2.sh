#!/usr/bin/env bash
# session52_dbias2.sh (session 52): session52_dbias.sh for a call that follows session52_one.sh on
# the same warm machine: the tree's build there (/tmp/pkg_full: bf16 + fp16, d64 / d128 / d256; its
# bf16 d128 bias kernels are the tree's, the same SASS as a bf16-only build's) stands for t0, so only
# the variant (-DFLASHSDPA_SM90_BWD_DBIAS_LDSM=1, bf16 d64 / d128) is built. Then its bias tests,
# ROUNDS (3) alternating process rounds of `bench --masks`, racecheck (then memcheck) of the masks
# tests whose d_bias rows take the aligned road. A cold machine takes session52_one.sh's build too.
# Prediction (kernel_notes_features.md, "d_bias read back with ldmatrix"): additive bias 2k backward
# +0-3%, key padding and the forwards unchanged.
#   bash scripts/dev/prebuild.sh ldsm "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_DBIAS_LDSM=1   (here first)
#   run(command="bash scripts/dev/session52_dbias2.sh", carry=[".whl", ".prebuilt"], timeout_s=300)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
base=full
if ! ls /tmp/pkg_full/python/flashsdpa/_C*.so >/dev/null 2>&1; then
  BUILD_TIMEOUT=300 BUILD_DTYPES="bf16;fp16" build_copy full "64;128;256"  # session52_one.sh's (prebuilt where carried)
fi
BUILD_DTYPES="bf16" build_copy ldsm "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_DBIAS_LDSM=1
require_copies $base ldsm
pkg() { echo "/tmp/pkg_$1/python${SITE:+:$SITE}"; }
PYTHONPATH="$(pkg ldsm)" tests "ldsm: bias tests" 120 tests_ldsm.log $PY -m pytest tests/gpu/test_masks_gpu.py \
  tests/gpu/test_mask_skip_gpu.py tests/gpu/test_bias_cells_gpu.py -q -p no:cacheprovider -n 8
((${#failed[@]})) && finish
for round in $(seq 1 "${ROUNDS:-3}"); do
  for name in $base ldsm; do
    PYTHONPATH="$(pkg $name)" timed "masks $name $round" 60 "masks_${name}_$round.log" \
      $PY -m flashsdpa bench --masks --rounds 1 --out "/tmp/bm_${name}_$round"
  done
done
for round in $(seq 1 "${ROUNDS:-3}"); do
  for name in $base ldsm; do
    echo "== $name round $round"
    grep -E "^  (key padding|additive bias)" "$OUT/masks_${name}_$round.log" | cut -c1-60
  done
done | tee "$OUT/dbias_ab.txt"
for tool in racecheck memcheck; do
  PYTHONPATH="$(pkg ldsm)" SAN_K="(through_sdpa and add and 1HSS) or (fully_masked_rows and add and 200)" \
    sanitize_subset $tool 70 tests/gpu/test_masks_gpu.py
done
finish
