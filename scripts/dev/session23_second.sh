#!/usr/bin/env bash
# session23_second.sh (session 22, prepared; for the next session's second call): issue 12's and
# 13's D 128 bars on three interleaved rounds with the sweep's spread order (bench/rounds.spread,
# session 21; not yet run on a 3-round bench: the causal 8k forward bar, 650, and the 8k bars, 720
# forward / 630 backward, are to be judged there), plus the decode rows (issue 11's B1 x 8k, 15 us
# bar) after session 22's no-grad road change. bf16 d64 / d128 / d256 build, the kernel tests.
#   run(command="bash scripts/dev/session23_second.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
FLASHSDPA_DTYPES="bf16" FLASHSDPA_HEAD_DIMS="64;128;256" BOTH_FAMILIES=0 \
  TESTS="tests/gpu/test_kernels.py" TESTS_TIMEOUT=90 \
  BENCH="--sweep --head-dims 128 --seqlens 2k 8k 16k --causal both --rounds 3 --no-memory --no-plot --decode" \
  BENCH_TIMEOUT=420 CALL_BUDGET=590 bash scripts/gpu_check.sh
