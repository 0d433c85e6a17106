#!/usr/bin/env bash
# session25_first.sh (session 25, first call): the committed tree's full build (all dtypes and head
# dims, FLASHSDPA_REQUIRE_KERNELS=all), the whole GPU suite, the forced-portable kernel tests, and
# racecheck + initcheck on the sanitizer subset (memcheck ran clean on these kernels in session 24).
#   run(command="bash scripts/dev/session25_first.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
BOTH_FAMILIES=1 SANITIZE=1 SANITIZE_TOOLS="racecheck initcheck" SANITIZE_TIMEOUT=90 RACECHECK_TIMEOUT=100 \
  TESTS_TIMEOUT=200 BENCH=none CALL_BUDGET=590 bash scripts/gpu_check.sh
