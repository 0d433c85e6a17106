#!/usr/bin/env bash
# session38_seventh.sh (session 38, the last ~3 device minutes): the kvcache sanitizer subset under
# racecheck with FLASHSDPA_UNDER_SANITIZER=1 (set by sanitize_subset: test_kvcache's PyTorch
# yardstick on the CPU, tests/helpers.py). Prediction: the append case that stopped racecheck inside
# PyTorch's GPU kernel now passes, and every case reads 0 hazards.
#   run(command="bash scripts/dev/session38_seventh.sh", carry=[".whl"], timeout_s=170)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy tree "64"
require_copies tree
PYTHONPATH="/tmp/pkg_tree/python${SITE:+:$SITE}" sanitize_subset racecheck 100 tests/gpu/test_kvcache.py
grep -E "Internal Sanitizer|RACECHECK SUMMARY|passed|failed" "$OUT/san_racecheck.log" | head -5
finish
