#!/usr/bin/env bash
# session21_masked.sh (session 21): the efficient-attention ops' C++ routers (routers.cpp's
# eff_forward / eff_backward: PyTorch's kernel through AOTInductor's C shim, no Python, for the calls
# only it takes). A bf16 d64 / d128 build; the router, shim, mask and SDPA GPU tests; racecheck of
# the sanitizer subset with its new kernel filter (the kernels did not change: the other tools run
# in the session's last call); the bench's overhead rows (a one-cell sweep carries them: the
# "unserved step (float32)" bar) and the model rows (the small float32 model's bar).
#   run(command="bash scripts/dev/session21_masked.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
FLASHSDPA_DTYPES="bf16" FLASHSDPA_HEAD_DIMS="64;128" BOTH_FAMILIES=0 SANITIZE=1 SANITIZE_TOOLS=racecheck SANITIZE_TIMEOUT=90 \
  TESTS="tests/gpu/test_cxx_routers.py tests/gpu/test_shim.py tests/gpu/test_masks_gpu.py tests/gpu/test_sdpa.py" \
  TESTS_TIMEOUT=150 BENCH="--sweep --quick --head-dims 128 --seqlens 2k --causal false --no-memory --no-plot --models" \
  BENCH_TIMEOUT=200 CALL_BUDGET=540 bash scripts/gpu_check.sh
