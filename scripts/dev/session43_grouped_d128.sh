#!/usr/bin/env bash
# session43_grouped_d128.sh (prepared in session 43, compiled only), one call, ~7-8 minutes: issue
# 13's grouped items on the d128 and d256 tiles, both dev A/B instantiations
# (FLASHSDPA_SM90_BWD_GROUP_D128=1: at the plain kernel's 24 / 240 registers, the producer
# spilling 92 bytes; FLASHSDPA_SM90_BWD_GROUP_WIDE=1: d256 at 56 / 224, 0 spills), launched only
# where FLASHSDPA_SM90_BWD_GROUP=k forces them. One bf16 d128 + d256 build; test_kernels.py's
# grouped rows at d128 / d256 (FLASHSDPA_TEST_GROUPED_DIMS) and the whole file with k = 3 forced on
# every plain backward; memcheck / racecheck of the sanitizer subset with k = 3; then 3 alternating
# rounds of bwd_ab.py at d128 and d256, k = 1 (the plain kernel) / 2 / 4 on the same build.
# Predictions (H100; kernel_notes_bwd_sm90.md): d256 (session 42) causal S 512 / 1k +10-20%, dense
# 1k +4-8%, 2k +2-4%; d128 ("Grouped items at d128, with the producer's spills") causal 512 / 1k
# +10-18%, dense 512 / 1k +3-6%, 2k +1-3%, the spills (producer only) costing under 1%.
#   run(command="bash scripts/dev/session43_grouped_d128.sh", carry=[".whl"], timeout_s=560)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16" build_copy g "128;256" \
  "CUDAFLAGS=-DFLASHSDPA_SM90_BWD_GROUP_D128=1 -DFLASHSDPA_SM90_BWD_GROUP_WIDE=1"
require_copies g
grep -A2 "Compiling entry.*bwd_sm90_kernel.*Lb1EEEE" "$OUT/build_g.log" | grep -E "spill|Used" | head -4
G="/tmp/pkg_g/python${SITE:+:$SITE}"
PYTHONPATH="$G" FLASHSDPA_TEST_GROUPED_DIMS=128,256 tests "grouped rows d128/d256" 120 tests_grouped.log \
  $PY -m pytest tests/gpu/test_kernels.py -q -p no:cacheprovider -n 8 -k grouped
PYTHONPATH="$G" FLASHSDPA_SM90_BWD_GROUP=3 tests "test_kernels (k 3)" 150 tests_k3.log \
  $PY -m pytest tests/gpu/test_kernels.py tests/gpu/test_windows.py -q -p no:cacheprovider -n 8 -k "not grouped"
for tool in memcheck racecheck; do
  FLASHSDPA_SM90_BWD_GROUP=3 PYTHONPATH="$G" sanitize_subset $tool 50 tests/gpu/test_kernels.py
done
((${#failed[@]})) && finish
cp -r /tmp/pkg_g /tmp/pkg_k1 && cp -r /tmp/pkg_g /tmp/pkg_k2 && cp -r /tmp/pkg_g /tmp/pkg_k4
AB_ENV_k1="FLASHSDPA_SM90_BWD_GROUP=1" AB_ENV_k2="FLASHSDPA_SM90_BWD_GROUP=2" AB_ENV_k4="FLASHSDPA_SM90_BWD_GROUP=4" \
  AB_STOP=520 ab_rounds "k1 k2 k4" 60 --dims 128 256 --causal both --seqlens 512 1024 2048 > "$OUT/ab_table.txt"
cat "$OUT/ab_table.txt"
finish
