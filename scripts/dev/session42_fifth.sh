#!/usr/bin/env bash
# session42_fifth.sh, one call, ~100 s (what session 42's device budget had left after refused
# starts): the correctness half of session42_fourth.sh. A bf16 + fp16 d64 build of the tree, the
# backward rows of test_kernels.py (the grouped rows force k = 2-4; the rule's own pick by the
# profiler's kernel names), test_fuzz_gpu.py, and memcheck of the sanitizer subset with
# FLASHSDPA_SM90_BWD_GROUP=3. No timing (session42_fourth.sh's A/B is the next session's).
#   run(command="bash scripts/dev/session42_fifth.sh", carry=[".whl"], timeout_s=120)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16;fp16" build_copy new "64"
require_copies new
export PYTHONPATH="/tmp/pkg_new/python${SITE:+:$SITE}"
tests "gpu tests" 60 tests_new.log $PY -m pytest tests/gpu/test_kernels.py tests/gpu/test_fuzz_gpu.py -q -p no:cacheprovider \
  -n 8 -k "bwd or fuzz or sanitizer_subset or kernels_match"
FLASHSDPA_SM90_BWD_GROUP=3 sanitize_subset memcheck 30 tests/gpu/test_kernels.py
finish
