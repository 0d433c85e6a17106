#!/usr/bin/env bash
# split_tail_final.sh: session 13's second device call: narrow build (bf16 + fp16, d64 / d128 /
# d256, both families), the whole GPU suite, the split tail's A/B again (5 interleaved rounds) and
# the forward sweep through the benchmark (every head dim, S 512-16k, 3 rounds, against cuDNN /
# FA2 / the default in one process). Short table last; exits 1 if a step failed (issue 10's
# extreme tie case and the fuzz case are known failures).
#   run(command="bash scripts/dev/split_tail_final.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 150 "64;128;256"
tests "GPU suite" 260 suite.log $PY -m pytest -q -p no:cacheprovider -n 10 tests/gpu
timed "A/B split tail" 60 ab.log $PY scripts/dev/split_tail_ab.py --rounds 5 --seqlens 1024 2048 4096 8192 16384
timed "bench sweep fwd" 170 bench_sweep.log $PY -m flashsdpa bench --sweep --direction fwd --head-dims 64 128 256 \
  --rounds 3 --no-plot --no-memory --out "$OUT/bench_sweep"
grep -E "^(FAILED|ERROR) " "$OUT"/suite.log | cut -c1-200 | head -12
tail -7 "$OUT/ab.log"
echo "==== bench sweep"; grep -E "fwd|bar|PASS|FAIL" "$OUT/bench_sweep.log" | tail -30
finish
