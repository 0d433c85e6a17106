#!/usr/bin/env bash
# session42_fourth.sh (prepared in session 42, compiled only), one call, ~5 minutes: issue 13's
# grouped items at d64 as the tree has them now (BwdTraitsSm90's kGrouped, k a launch argument
# picked by bwd_launch_sm90.cuh's bwd_group_sm90, which runs only under
# FLASHSDPA_SM90_BWD_GROUP=auto until this script has passed: then set kGroupRuleByDefault;
# session42_third.sh timed the compile-time k = 2 / 4 of the patch). Base: the same
# build with FLASHSDPA_SM90_BWD_GROUP=1 (the plain kernel). The GPU tests of test_kernels.py
# (the grouped rows force k = 2-4), test_fuzz_gpu.py (the bottom-right flash fallback) and
# test_windows.py on the new build; memcheck / racecheck of the sanitizer subset with
# FLASHSDPA_SM90_BWD_GROUP=3 (its d64 rows grouped); 3 alternating rounds of bwd_ab.py, d64, the
# rule's own k. Prediction (H100): S 512 +8%, causal +13%; 1k +5%, causal +22%; 2k +2%, causal +7%;
# 8k 1.00, causal +1-3% (the patch's numbers at the rule's k; a runtime k loop costs nothing).
#   run(command="bash scripts/dev/session42_fourth.sh", carry=[".whl"], timeout_s=300)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export FLASHSDPA_SM90_BWD_GROUP=auto  # the rule, for the tests (the A/B sets each side's)
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16;fp16" build_copy new "64"
require_copies new
export PYTHONPATH_NEW="/tmp/pkg_new/python${SITE:+:$SITE}"
PYTHONPATH="$PYTHONPATH_NEW" tests "gpu tests (new)" 110 tests_new.log $PY -m pytest tests/gpu/test_kernels.py \
  tests/gpu/test_fuzz_gpu.py tests/gpu/test_windows.py -q -p no:cacheprovider -n 8
for tool in memcheck racecheck; do
  FLASHSDPA_SM90_BWD_GROUP=3 PYTHONPATH="$PYTHONPATH_NEW" sanitize_subset $tool 40 tests/gpu/test_kernels.py
done
((${#failed[@]})) && finish
# The base: the same build with k forced to 1 (the plain kernel, SASS byte-identical to the tree's
# before grouping: sass_hashes.py).
rm -rf /tmp/pkg_base && cp -r /tmp/pkg_new /tmp/pkg_base
AB_ENV_base="FLASHSDPA_SM90_BWD_GROUP=1" AB_ENV_new="FLASHSDPA_SM90_BWD_GROUP=auto" AB_STOP=280 ab_rounds "base new" 50 --dims 64 --causal both --seqlens 512 1024 2048 8192 > "$OUT/ab_table.txt"
cat "$OUT/ab_table.txt"
finish
