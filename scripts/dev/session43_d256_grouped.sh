#!/usr/bin/env bash
# session43_d256_grouped.sh (prepared in session 42, compiled only), one call, ~4-5 minutes: issue
# 13's grouped items on the d256 tile (FLASHSDPA_SM90_BWD_GROUP_WIDE=1: the dev A/B instantiation,
# launched only where FLASHSDPA_SM90_BWD_GROUP=k forces it). One bf16 d256 build; the d256 rows of
# test_kernels.py and the sanitizer subset's san_wide256 (memcheck, racecheck) with k = 3; then 3
# alternating rounds of bwd_ab.py at d256, k = 1 (the plain kernel) / 2 / 4 on the same build.
# Prediction (H100; kernel_notes_bwd_sm90.md, "Grouped items at d256"): causal S 512 / 1k +10-20%,
# dense 1k +4-8%, 2k +2-4%, 8k within 1%.
#   run(command="bash scripts/dev/session43_d256_grouped.sh", carry=[".whl"], timeout_s=330)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16" build_copy g256 "256" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_GROUP_WIDE=1
require_copies g256
# (FLASHSDPA_TEST_GROUPED_DIMS: the grouped rows at d256 too, each asserting that the grouped kernel ran)
PYTHONPATH="/tmp/pkg_g256/python${SITE:+:$SITE}" FLASHSDPA_SM90_BWD_GROUP=3 FLASHSDPA_TEST_GROUPED_DIMS=256 \
  tests "d256 tests (k 3)" 90 tests_g256.log \
  $PY -m pytest tests/gpu/test_kernels.py -q -p no:cacheprovider -n 8 -k "bwd256 or shape_table or head_dims or gqa or scale or grouped"
for tool in memcheck racecheck; do
  FLASHSDPA_SM90_BWD_GROUP=3 PYTHONPATH="/tmp/pkg_g256/python${SITE:+:$SITE}" sanitize_subset $tool 40 tests/gpu/test_kernels.py
done
((${#failed[@]})) && finish
cp -r /tmp/pkg_g256 /tmp/pkg_k1 && cp -r /tmp/pkg_g256 /tmp/pkg_k2 && cp -r /tmp/pkg_g256 /tmp/pkg_k4
AB_ENV_k1="FLASHSDPA_SM90_BWD_GROUP=1" AB_ENV_k2="FLASHSDPA_SM90_BWD_GROUP=2" AB_ENV_k4="FLASHSDPA_SM90_BWD_GROUP=4" \
  AB_STOP=300 ab_rounds "k1 k2 k4" 50 --dims 256 --causal both --seqlens 512 1024 2048 8192 > "$OUT/ab_table.txt"
cat "$OUT/ab_table.txt"
finish
