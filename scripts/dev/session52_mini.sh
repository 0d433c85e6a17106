#!/usr/bin/env bash
# session52_mini.sh (session 52): session52_one.sh cut to what ~4 minutes of device time hold (the
# rest of the session's 30 went to refused starts): bf16 + fp16 at d128 / d256 only (the fp16 forms
# of the adopted bias / modifier kernels, the d256 forward's bias kernel), the changed kernels' test
# files under the time left, then memcheck of the masks' sanitizer subset if time remains.
#   run(command="bash scripts/dev/session52_mini.sh", carry=[".whl"], timeout_s=<budget left>)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_TIMEOUT=170 BUILD_DTYPES="bf16;fp16" build_copy full "128;256"
require_copies full
export PYTHONPATH="/tmp/pkg_full/python${SITE:+:$SITE}"
tests "changed kernels' tests" 150 tests_changed.log $PY -m pytest tests/gpu/test_masks_gpu.py \
  tests/gpu/test_bias_cells_gpu.py tests/gpu/test_features_gpu.py tests/gpu/test_mask_skip_gpu.py \
  -q -p no:cacheprovider -n 8 -x
tail -2 "$OUT/tests_changed.log"
sanitize_subset memcheck 40 tests/gpu/test_masks_gpu.py tests/gpu/test_features_gpu.py
finish
