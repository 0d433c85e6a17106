#!/usr/bin/env bash
# session21_first.sh (session 20, prepared; for the next session's first call): what session 20's
# final call left unverified. Build bf16 d64 / d128 / d256 (both families); test_fwd_schedule with
# its fixed long cases (causal_8k_d64 / static_8k_d256, 4 heads: more tiles than SMs); racecheck of
# gpu_check's sanitizer subset with room (it needs ~40 s; session 20 cut it at 30); then the bench's
# model rows (the Llama-style train step, prefill, per-token generation, inside and outside
# enable()), which no session has run since the late dK / dynamic-order defaults.
#   run(command="bash scripts/dev/session21_first.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
FLASHSDPA_DTYPES="bf16" FLASHSDPA_HEAD_DIMS="64;128;256" BOTH_FAMILIES=0 SANITIZE=1 SANITIZE_TIMEOUT=90 \
  TESTS="tests/gpu/test_fwd_schedule.py" TESTS_TIMEOUT=120 BENCH="--models" BENCH_TIMEOUT=240 CALL_BUDGET=590 \
  bash scripts/gpu_check.sh
