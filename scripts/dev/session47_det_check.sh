#!/usr/bin/env bash
# session47_det_check.sh (session 47), one call, ~2 minutes: the deterministic launch order's final
# form (BwdGridOrder: dense deterministic calls grouped by a wave's heads) on a bf16 d64 / d128
# build: every deterministic test and test_kernels' backward rows, memcheck and racecheck of the
# deterministic bitwise test, and one round of `bench --deterministic`.
#   run(command="bash scripts/dev/session47_det_check.sh", carry=[".whl"], timeout_s=240)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
unset FLASHSDPA_SM90_BWD_GROUP
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16" build_copy detf "64;128"
require_copies detf
export PYTHONPATH="/tmp/pkg_detf/python${SITE:+:$SITE}"
tests "deterministic + bwd tests" 120 tests_detf.log \
  $PY -m pytest tests/gpu/test_kernels.py tests/gpu/test_training.py -q -p no:cacheprovider -n 8 -k "determin or bwd or group"
for tool in racecheck memcheck; do
  FLASHSDPA_UNDER_SANITIZER=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 timed "sanitizer $tool" 90 \
    "san_$tool.log" compute-sanitizer --tool "$tool" --error-exitcode 9 --target-processes all \
    $PY -m pytest tests/gpu/test_kernels.py -q -x -p no:cacheprovider -k "test_bwd_deterministic_bitwise and none"
done
timed "bench deterministic" 60 det.log $PY -m flashsdpa bench --deterministic --rounds 2 --out /tmp/b_detf
grep -A11 "^Deterministic mode" "$OUT/det.log"
finish
