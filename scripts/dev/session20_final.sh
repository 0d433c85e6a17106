#!/usr/bin/env bash
# session20_final.sh: the session's one validation call after its kernel changes (the sm90
# forward's dynamic causal order at every length at d64 and up to 32 blocks at d256; stmatrix dS^T
# stores in the d64 backward; the tensor-pipe row sums removed, the d128 forward's and backward's
# SASS byte-identical to session 19's suite-tested tree). Build bf16 d64 / d128 / d256, both
# families; gpu_check's suite, sanitizer subset (memcheck, racecheck, synccheck) and quick bench.
#   run(command="bash scripts/dev/session20_final.sh", carry=[".whl"], timeout_s=350)
set -uo pipefail
cd "$(dirname "$0")/../.."
FLASHSDPA_DTYPES="bf16" FLASHSDPA_HEAD_DIMS="64;128;256" BOTH_FAMILIES=0 SANITIZE=1 SANITIZE_TIMEOUT=30 \
  TESTS_TIMEOUT=170 BENCH="--quick" BENCH_TIMEOUT=90 CALL_BUDGET=340 bash scripts/gpu_check.sh
