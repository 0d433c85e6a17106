#!/usr/bin/env bash
# session30_first.sh (prepared in session 29, not yet run): after the d64 tall step landed,
#   1. the zero-batch probe (session29_third.sh's question: is SDPA's None for a zero batch outside
#      enable() PyTorch's own? the call without flashsdpa imported, then under each backend),
#   2. the benchmark's backward sweep at d64 / d128, 3 rounds (issue 13's bars, FA4 and cuDNN in
#      the same process; the tall step's first bench rows),
#   3. the model rows, 3 rounds (the small model's heads are d64: its bf16 step now runs the tall
#      step at S 128).
#   run(command="bash scripts/dev/session30_first.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 200 "64;128"
timed "probe, no import" 60 probe_noimport.log $PY scripts/dev/bad_inputs_probe.py --no-import
cat "$OUT/probe_noimport.log"
timed "probe" 60 probe.log $PY scripts/dev/bad_inputs_probe.py
cat "$OUT/probe.log"
timed "bench bwd sweep" 300 bench_sweep.log $PY -m flashsdpa bench --sweep --direction bwd --head-dims 64 128 \
  --rounds 3 --no-memory --no-plot --no-overhead --out "$OUT/bench_sweep"
tail -60 "$OUT/bench_sweep.log"
timed "bench models" 200 bench_models.log $PY -m flashsdpa bench --models --rounds 3 --no-plot --out "$OUT/bench_models"
tail -40 "$OUT/bench_models.log"
finish
