#!/usr/bin/env bash
# session22_final.sh (session 22, last call): the whole GPU suite on a bf16 d64 / d128 / d256 build
# with the sm90 backward's flag probe and no-grad calls through SDPA by default; the sanitizers
# (racecheck, memcheck, synccheck) on their subsets; the bench's quick d128 2k cell (forward and
# backward against cuDNN) with the overhead and model rows, 3 rounds.
#   run(command="bash scripts/dev/session22_final.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
FLASHSDPA_DTYPES="bf16" FLASHSDPA_HEAD_DIMS="64;128;256" BOTH_FAMILIES=0 SANITIZE=1 \
  SANITIZE_TOOLS="racecheck memcheck synccheck" SANITIZE_TIMEOUT=60 RACECHECK_TIMEOUT=90 \
  TESTS="tests/gpu" TESTS_TIMEOUT=220 \
  BENCH="--sweep --quick --head-dims 128 --seqlens 2k --causal false --no-memory --no-plot --models --rounds 3" \
  BENCH_TIMEOUT=170 CALL_BUDGET=470 bash scripts/gpu_check.sh
