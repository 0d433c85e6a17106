#!/usr/bin/env bash
# session21_probe.sh (session 21): where the unserved float32 step's remaining +12 us goes with the
# efficient-attention ops' C++ routers (call 2: 111.8 -> 12.3 us). A bf16 d128 build; the router
# tests (the reason order and the deterministic-alert test fixed after call 2); then
# small_fp32_profile.py's per-call parts (entry, the aten op's forward alone, its backward on the
# main thread and through autograd) and its 15-pair model-step ratio.
#   run(command="bash scripts/dev/session21_probe.sh", carry=[".whl"], timeout_s=400)
set -uo pipefail
cd "$(dirname "$0")/../.."
FLASHSDPA_DTYPES="bf16" FLASHSDPA_HEAD_DIMS="128" BOTH_FAMILIES=0 \
  TESTS="tests/gpu/test_cxx_routers.py tests/gpu/test_shim.py" TESTS_TIMEOUT=120 BENCH=none CALL_BUDGET=300 \
  bash scripts/gpu_check.sh
rc=$?
source scripts/device_env.sh
timeout 60 $PY scripts/dev/small_fp32_profile.py --calls 2>&1 | tee "$OUT/probe_calls.log" | tail -40
timeout 60 $PY scripts/dev/small_fp32_profile.py --pairs 15 2>&1 | tee "$OUT/probe_pairs.log" | head -30
exit $rc
