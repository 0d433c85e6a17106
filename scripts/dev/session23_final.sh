#!/usr/bin/env bash
# session23_final.sh (session 23, last call): the sm90 backward without the count-pairs / third-buffer
# variants and with the sem_index guard, on a bf16 + fp16 d64 / d128 build (fp16's SASS changed with
# the guard); the kernel tests, memcheck of the subset, the quick d128 2k cell with the overhead rows
# (the entry's float32 fast lane), then scripts/dev/power_probe.py (sustained throughput, clock and
# power of ours against cuDNN).
#   run(command="bash scripts/dev/session23_final.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
FLASHSDPA_DTYPES="bf16;fp16" FLASHSDPA_HEAD_DIMS="64;128" BOTH_FAMILIES=0 SANITIZE=1 \
  SANITIZE_TOOLS="memcheck" SANITIZE_TIMEOUT=60 \
  TESTS="tests/gpu/test_kernels.py tests/gpu/test_one_hot_grads.py tests/gpu/test_shim.py" TESTS_TIMEOUT=150 \
  BENCH="--sweep --quick --head-dims 128 --seqlens 2k --causal false --no-memory --no-plot --rounds 2" \
  BENCH_TIMEOUT=90 CALL_BUDGET=330 bash scripts/gpu_check.sh
rc=$?
source scripts/device_env.sh
timeout 150 python3 scripts/dev/power_probe.py --seconds 3 --rounds 2 --problems fwd8k bwd8k 2>&1 | tee "$OUT/power.log" | tail -12
exit $rc
