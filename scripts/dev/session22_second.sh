#!/usr/bin/env bash
# session22_second.sh (session 21, prepared; for the next session's second call): the two prepared
# measurements that need no full build, in one call (one machine start):
#   1. a bf16 d128 build and the shim tests, then scripts/dev/eager_ab.py (the no-grad eager path
#      against the road through SDPA to the C++ router: per call and generating after 4k);
#   2. scripts/dev/bwd_timeline.sh (the sm90 backward's dQ hand-over, one CTA step by step).
#   run(command="bash scripts/dev/session22_second.sh", carry=[".whl"], timeout_s=420)
set -uo pipefail
cd "$(dirname "$0")/../.."
FLASHSDPA_DTYPES="bf16" FLASHSDPA_HEAD_DIMS="128" BOTH_FAMILIES=0 TESTS="tests/gpu/test_shim.py" TESTS_TIMEOUT=90 \
  BENCH=none bash scripts/gpu_check.sh
rc=$?
source scripts/device_env.sh
timeout 150 $PY scripts/dev/eager_ab.py --rounds 15 2>&1 | tee "$OUT/eager_ab.log" | tail -12
OUT="$OUT/timeline" bash scripts/dev/bwd_timeline.sh
trc=$?
pack_out  # 4 + 1 + 8 files: one out.tgz (the device tool brings back at most 8)
exit $(( rc || trc ))
