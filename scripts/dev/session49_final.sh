#!/usr/bin/env bash
# session49_final.sh (session 49), one call, ~5 minutes: the session's final tree in its own build
# (the d256 plain kernel's wave groups at 2k, FLASHSDPA_SM90_BWD_WAVE_WIDE = 2048 by default now: its
# SASS is session49_fifth.sh's ww2k build's), then where the backward stands against cuDNN.
# 1. bf16 d64 / d128 / d256: backward and training tests, memcheck of test_kernels' sanitizer subset.
# 2. `bench --sweep --direction bwd` (every head dim and length, 3 rounds, with the overhead part),
#    then, if time is left, `bench --models --model-cases "train B"` (3 rounds: the Llama train rows).
# Prediction: bwd vs cuDNN at d128 causal S 512 / 1k / 2k ~1.0 / 0.95-0.97 / ~0.99 (from 0.84 / 0.85 /
# 0.95 in session 48's sweep), d256 causal 2k ~0.86; dense cells as in session 48; Llama train rows
# unchanged (their calls are outside the changed orders: GQA 16/4 at 2k, 8k).
#   run(command="bash scripts/dev/session49_final.sh", carry=[".whl"], timeout_s=400)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16" build_copy final "64;128;256"
require_copies final
export PYTHONPATH="/tmp/pkg_final/python${SITE:+:$SITE}"
tests "final: bwd + training tests" 120 tests_final.log $PY -m pytest tests/gpu/test_kernels.py tests/gpu/test_training.py \
  -q -p no:cacheprovider -n 8 -k "bwd or train or determin"
sanitize_subset memcheck 40 tests/gpu/test_kernels.py
((${#failed[@]})) && finish
timed "bench sweep bwd" 170 sweep.log $PY -m flashsdpa bench --sweep --direction bwd --no-memory --no-plot --rounds 3 \
  --out /tmp/b_sweep
grep -A9 "^bwd D=" "$OUT/sweep.log" | grep -v "^--" | cut -c1-110
grep -E "overhead|sweep  " "$OUT/sweep.log" | tail -14
if (( SECONDS < 250 )); then
  timed "bench models (train)" 110 models.log $PY -m flashsdpa bench --models --model-cases "train B" --rounds 3 --out /tmp/b_models
  tail -14 "$OUT/models.log"
fi
finish
