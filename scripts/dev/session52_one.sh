#!/usr/bin/env bash
# session52_one.sh (session 52), one call, ~8-9 minutes: session 51's adopted kernels (dK late in the
# modifier kernels, the lean staged bias) in the forms no GPU has run yet: fp16, and the d256
# forward's bias kernel (6,984 -> 6,832 SASS instructions). A build of bf16 + fp16 at d64 / d128 /
# d256 (the buckets those kernels live in; session48_full.sh's seven buckets take ~5 minutes more
# than a session 52 with ~20 minutes of device time could give), the whole GPU suite on it, then
# memcheck / racecheck of the masks' and the modifiers' sanitizer subsets (fp16 and d256 rows
# included), then one round of `bench --masks` (the bias rows on this card).
#   run(command="bash scripts/dev/session52_one.sh", carry=[".whl"], timeout_s=590)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_TIMEOUT=240 BUILD_DTYPES="bf16;fp16" build_copy full "64;128;256"
require_copies full
export PYTHONPATH="/tmp/pkg_full/python${SITE:+:$SITE}"
tests "gpu tests" 240 tests.log $PY -m pytest tests/gpu -q -p no:cacheprovider -n 8 -m "not slow"
tail -3 "$OUT/tests.log"
for tool in memcheck racecheck; do
  (( SECONDS < 440 )) && sanitize_subset $tool 50 tests/gpu/test_masks_gpu.py tests/gpu/test_features_gpu.py
done
(( SECONDS < 500 )) && timed "bench masks" 70 masks.log $PY -m flashsdpa bench --masks --rounds 1 --out /tmp/b_masks \
  && tail -20 "$OUT/masks.log"
finish
