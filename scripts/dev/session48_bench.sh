#!/usr/bin/env bash
# session48_bench.sh (session 48), one call, ~8-9 minutes: the whole benchmark on the tree, by part
# (each part its own time limit, so one slow part cannot take the rest): the model rows first (the
# user-level bars of issues 9, 11 and 13: train step, prefill, generation, the small model), then
# the standard sweep (3 rounds, D 64 / 128 / 256, fwd + bwd), decode, masks, deterministic, window.
# The last full run of every part was session 17's; the model rows' last run session 38's.
#   run(command="bash scripts/dev/session48_bench.sh", carry=[".whl"], timeout_s=595)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16" build_copy bench "64;128;256"
require_copies bench
export PYTHONPATH="/tmp/pkg_bench/python${SITE:+:$SITE}"
timed "bench models" 150 models.log $PY -m flashsdpa bench --models --rounds 3 --out /tmp/b_models
timed "bench sweep" 210 sweep.log $PY -m flashsdpa bench --sweep --rounds 3 --no-plot --out /tmp/b_sweep
timed "bench decode" 40 decode.log $PY -m flashsdpa bench --decode --rounds 3 --out /tmp/b_decode
timed "bench masks" 50 masks.log $PY -m flashsdpa bench --masks --rounds 3 --out /tmp/b_masks
timed "bench deterministic" 35 det.log $PY -m flashsdpa bench --deterministic --rounds 3 --out /tmp/b_det
timed "bench window" 25 window.log $PY -m flashsdpa bench --window --rounds 3 --out /tmp/b_window
for log in models sweep decode masks det window; do
  echo "==== $log"; awk '/^Bars/{f=1} f' "$OUT/$log.log" | grep -E "PASS|FAIL" | cut -c1-150
done
finish
