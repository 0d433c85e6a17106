#!/usr/bin/env bash
# session22_first.sh (session 21, prepared; for the next session's first call): racecheck of
# test_kernels.py's sanitizer subset with gpu_check's new racecheck cut (our kernels only, that file
# only, 240 s), which has not finished since session 19; memcheck / synccheck of the usual subset;
# no bench (the call would pass 600 s: build ~60, tests ~40, racecheck <= 240, the others <= 120).
# Then small_fp32_profile.py --calls (the unserved float32 step split into forward with grad and backward).
#   run(command="bash scripts/dev/session22_first.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
FLASHSDPA_DTYPES="bf16" FLASHSDPA_HEAD_DIMS="64;128;256" BOTH_FAMILIES=0 SANITIZE=1 \
  SANITIZE_TOOLS="racecheck memcheck synccheck" SANITIZE_TIMEOUT=60 RACECHECK_TIMEOUT=240 \
  TESTS="tests/gpu/test_cxx_routers.py tests/gpu/test_kernels.py" TESTS_TIMEOUT=120 BENCH=none \
  CALL_BUDGET=520 bash scripts/gpu_check.sh
rc=$?
# Issue 9's unserved float32 step (+11.7 us in session 21): the forward with grad alone beside the
# step, so the step's excess splits into forward and backward (session 21 had only the no-grad
# forward and the main-thread backward, each at or below PyTorch's).
source scripts/device_env.sh
timeout 60 $PY scripts/dev/small_fp32_profile.py --calls 2>&1 | tee "$OUT/probe_calls.log" | head -10
exit $rc
