#!/usr/bin/env bash
# session22_first.sh (session 21, prepared; for the next session's first call): racecheck of
# test_kernels.py's sanitizer subset with gpu_check's new racecheck cut (our kernels only, that file
# only, 240 s), which has not finished since session 19; memcheck / synccheck of the usual subset;
# then the quick bench (every bar of the sweep, the overhead rows, 1 round).
#   run(command="bash scripts/dev/session22_first.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
FLASHSDPA_DTYPES="bf16" FLASHSDPA_HEAD_DIMS="64;128;256" BOTH_FAMILIES=0 SANITIZE=1 \
  SANITIZE_TOOLS="racecheck memcheck synccheck" SANITIZE_TIMEOUT=60 RACECHECK_TIMEOUT=240 \
  TESTS="tests/gpu/test_cxx_routers.py tests/gpu/test_kernels.py" TESTS_TIMEOUT=120 BENCH="--quick" BENCH_TIMEOUT=150 \
  CALL_BUDGET=590 bash scripts/gpu_check.sh
