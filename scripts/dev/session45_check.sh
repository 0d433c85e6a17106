#!/usr/bin/env bash
# session45_check.sh, one call, ~3 minutes: the d64 grouped rule as the default (no
# FLASHSDPA_SM90_BWD_GROUP: bwd_launch_sm90.cuh's rule, causal bound 16 since session 45) on a
# bf16 + fp16 d64 build: test_kernels, the fuzz file (its D 8 / Dv 16 example that session 45's
# first call failed) and the windows; memcheck on
# the sanitizer subset. The d256 grouped check and A/B are session43_d256_grouped.sh's (a second
# call on the warm machine).
#   run(command="bash scripts/dev/session45_check.sh", carry=[".whl"], timeout_s=240)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
unset FLASHSDPA_SM90_BWD_GROUP
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16;fp16" build_copy r45 "64"
require_copies r45
R="/tmp/pkg_r45/python${SITE:+:$SITE}"
PYTHONPATH="$R" tests "gpu tests (default rule)" "${TEST_LIMIT:-150}" tests_r45.log \
  $PY -m pytest tests/gpu/test_kernels.py tests/gpu/test_fuzz_gpu.py tests/gpu/test_windows.py -q -p no:cacheprovider -n 8
FLASHSDPA_SM90_BWD_GROUP=3 PYTHONPATH="$R" sanitize_subset memcheck 45 tests/gpu/test_kernels.py
# (session 46) what cuDNN launches at S 512 (forward and backward, causal and not: its tile in the
# generated name), where issue 12's causal cells stand at 0.83x.
PYTHONPATH="$R" timeout 60 $PY scripts/dev/bwd_launch_spy.py --dims 128 64 --seqlen 512 > "$OUT/spy512.txt" 2>&1
grep -E "cudnn" "$OUT/spy512.txt" | cut -c1-230
finish
