#!/usr/bin/env bash
# session48_full.sh (session 48), one call, ~8-9 minutes: the whole GPU suite on a build of every
# head-dim bucket and both dtypes (sm_90), the first since session 40's (2363 passed): sessions
# 41-47 changed the sm90 forward (the uniform warpgroup index) and backward (grouped items at d64 /
# d256, the deterministic launch order) and ran subsets only. Then memcheck / racecheck / synccheck
# of test_kernels' sanitizer subset (both directions, both families' rows), and `bench --quick` if
# the time allows. The tree is session 47's with the two-writer variant removed (write_dq and the
# producer's dispatch byte-for-byte as before b2b4f28; its A/B: session48_det_writers.sh).
#   run(command="bash scripts/dev/session48_full.sh", carry=[".whl"], timeout_s=590)
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
