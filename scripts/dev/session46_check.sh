#!/usr/bin/env bash
# session46_check.sh, one call, ~4-5 minutes: session 46's two host changes to the sm90 backward's
# grouped rule (bwd_launch_sm90.cuh: deterministic mode runs the plain kernel; d256's grouped
# kernel compiled by default and run on short causal calls) on a bf16 d64 / d128 / d256 build:
# test_kernels' grouped, rule, d256, sanitizer and shape-table rows and test_windows with the
# default rule; memcheck and racecheck of the sanitizer subset with k = 3 (san_tall64, san_wide256
# grouped); the bench's deterministic part (3 rounds); ours against cuDNN at d256 causal S 512 and
# 1k (2 rounds).
#   run(command="bash scripts/dev/session46_check.sh", carry=[".whl"], timeout_s=280)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
unset FLASHSDPA_SM90_BWD_GROUP
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
# (LEAN=1: d64 / d256 only, the tests and memcheck: ~100 s)
BUILD_DTYPES="bf16" build_copy r46 "$([[ ${LEAN:-} ]] && echo "64;256" || echo "64;128;256")"
require_copies r46
export PYTHONPATH="/tmp/pkg_r46/python${SITE:+:$SITE}"
tests "gpu tests (default rule)" "${TEST_LIMIT:-120}" tests_r46.log \
  $PY -m pytest tests/gpu/test_kernels.py tests/gpu/test_windows.py -q -p no:cacheprovider -n 8 \
  -k "$([[ ${LEAN:-} ]] && echo "group or bwd256 or sanitizer" || echo "group or bwd256 or sanitizer or shape_table or gqa or window")"
FLASHSDPA_SM90_BWD_GROUP=3 sanitize_subset memcheck 50 tests/gpu/test_kernels.py
[[ ${LEAN:-} ]] && finish
timed "bench deterministic" 60 det.log $PY -m flashsdpa bench --deterministic --rounds 3 --out /tmp/b_det
grep -A12 "^Deterministic mode" "$OUT/det.log"
FLASHSDPA_SM90_BWD_GROUP=3 sanitize_subset racecheck 50 tests/gpu/test_kernels.py
timed "bench d256 bwd" 90 sweep256.log $PY -m flashsdpa bench --sweep --no-overhead --no-memory --no-plot \
  --direction bwd --head-dims 256 --seqlens 512 1k --causal true --rounds 2 \
  --backends flashsdpa torch-cudnn --out /tmp/b_256
grep -B2 -A14 "ours / cuDNN\|vs cuDNN" "$OUT/sweep256.log" | head -40
finish
