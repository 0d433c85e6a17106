#!/usr/bin/env bash
# h200_bars.sh (prepared in session 40), one call on an H200 only, ~7-9 minutes: the issue bars set
# on the H200 that no session since 36 could measure there (H100s only): decode B 1 x 8k <= 15 us
# and 3.9 TB/s (issue 11), d128 8k forward 720 / backward 630 / 540 TFLOP/s and the 8k cells
# against cuDNN (issues 12, 13), the small model's bf16 train step <= FA2 only and fp32 within 2%
# (issue 9, 9 rounds), the deterministic backward within 15% of the default (issue 13, session 46's
# bench part), issue 14's bias rows (session 51) and feature rows (session 54). Refuses to run on another card: these bars are
# the H200's.
#   run(command="bash scripts/dev/h200_bars.sh", carry=[".whl", ".prebuilt"], timeout_s=600, kind="nvidia-h200")
# (The masks and features parts run last: a call cut at its limit loses them first.)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  echo "not an H200: $(nvidia-smi --query-gpu=name --format=csv,noheader)"; exit 3
fi
# The build session53_one.sh and bwd_ncu.sh use (prebuilt and carried where prebuild.sh made it:
# carry=[".whl", ".prebuilt"]); the bars read its bf16 d64 / d128 kernels.
BUILD_TIMEOUT=300 BUILD_DTYPES="bf16;fp16" build_copy full "64;128;256"
require_copies full
export PYTHONPATH="/tmp/pkg_full/python${SITE:+:$SITE}"
timed "bench decode" 120 decode.log $PY -m flashsdpa bench --decode --rounds 3 --out /tmp/b_decode
timed "bench d128 8k" 200 sweep.log $PY -m flashsdpa bench --sweep --no-overhead --no-memory --no-plot \
  --head-dims 128 --seqlens 8k --direction both --rounds 3 --out /tmp/b_sweep
timed "bench deterministic" 90 det.log $PY -m flashsdpa bench --deterministic --rounds 3 --out /tmp/b_det
timed "bench small models" 150 models.log $PY -m flashsdpa bench --models --model-cases "small train" --rounds 9 \
  --out /tmp/b_models
# Session 51: issue 14's bias rows (420 / 300 TFLOP/s, set on the H200; H100s read 410-415 / 223-227).
timed "bench masks" 150 masks.log $PY -m flashsdpa bench --masks --rounds 3 --out /tmp/b_masks
# Session 54: issue 14's dropout 0.1 S 4k and softcap 50 S 8k bars (bench --features), H200 values.
timed "bench features" 90 features.log $PY -m flashsdpa bench --features --rounds 3 --out /tmp/b_features
for log in decode sweep det models masks features; do echo "==== $log"; tail -30 "$OUT/$log.log"; done
finish
