#!/usr/bin/env bash
# session50_full.sh (prepared in session 49), one call, ~8-9 minutes: the whole GPU suite on a build
# of every head-dim bucket and both dtypes (sm_90), the first since session 48's (2492 passed, 1 known
# fuzz failure): session 49 changed the sm90 backward's launch order (wave groups to 16 key blocks,
# in deterministic mode to 8, the d256 plain kernel's to 2k keys) and ran subsets only (backward,
# deterministic, schedule and training tests; memcheck / racecheck). Then memcheck / racecheck /
# synccheck of test_kernels' sanitizer subset, and `bench --quick` if the time allows.
#   run(command="bash scripts/dev/session50_full.sh", carry=[".whl"], timeout_s=590)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_TIMEOUT=300 BUILD_DTYPES="bf16;fp16" build_copy full "32;64;96;128;192;256;512"
require_copies full
export PYTHONPATH="/tmp/pkg_full/python${SITE:+:$SITE}"
export FLASHSDPA_REQUIRE_KERNELS=all
tests "gpu tests" 250 tests.log $PY -m pytest tests/gpu -q -p no:cacheprovider -n 8 -m "not slow"
tail -3 "$OUT/tests.log"
for tool in memcheck racecheck synccheck; do
  (( SECONDS < 480 )) && sanitize_subset $tool 45 tests/gpu/test_kernels.py
done
(( SECONDS < 500 )) && timed "bench quick" 75 bench.log $PY -m flashsdpa bench --quick --out /tmp/b_quick \
  && tail -25 "$OUT/bench.log"
finish
