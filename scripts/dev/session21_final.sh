#!/usr/bin/env bash
# session21_final.sh (session 21, last call): the whole GPU suite on a bf16 d64 / d128 / d256 build
# with the efficient-attention ops' C++ routers; the bench's overhead rows (a one-cell sweep carries
# them) and the model rows, 3 rounds. No kernel changed this session: no sanitizer run.
#   run(command="bash scripts/dev/session21_final.sh", carry=[".whl"], timeout_s=540)
set -uo pipefail
cd "$(dirname "$0")/../.."
FLASHSDPA_DTYPES="bf16" FLASHSDPA_HEAD_DIMS="64;128;256" BOTH_FAMILIES=0 \
  TESTS="tests/gpu" TESTS_TIMEOUT=220 \
  BENCH="--sweep --quick --head-dims 128 --seqlens 2k --causal false --no-memory --no-plot --models --rounds 3" \
  BENCH_TIMEOUT=200 CALL_BUDGET=520 bash scripts/gpu_check.sh
