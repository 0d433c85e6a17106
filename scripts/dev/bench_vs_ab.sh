#!/usr/bin/env bash
# bench_vs_ab.sh (session 19, prepared; for the next session): why the bench's causal 8k forward
# cell reads ours 612-622 TFLOP/s (sessions 17 and 19, one round) while `bwd_ab.py --forward` reads
# 657 (the old order) / ~684 (today's) for the same shape and layout, with cuDNN at 606-624 in both
# (docs/performance.md, session 19). One d128 bf16 build; the GPU's SM clock and power sampled every
# 100 ms throughout (nvidia-smi, clocks.csv), then in order, one process each:
#   1. bwd_ab.py --forward --causal yes --seqlens 8192 (3 rounds)            the A/B's reading
#   2. bench --quick --sweep --head-dims 128 --seqlens 8192 --causal true --direction fwd (3 rounds)
#   3. bench --quick --sweep --head-dims 128 (the whole quick sweep, 1 round: the cell after the rest)
#   4. 1 again (whether the GPU's state after 3 changed it)
# Readings: 2 ~ 1 and 3 < 2 says the cell's history (clocks, power: see clocks.csv at each step's
# time) sets it; 2 < 1 says the two timers differ (then diff their code paths: sets, warm-up, the
# reference check before timing).
#   run(command="bash scripts/dev/bench_vs_ab.sh", carry=[".whl"], timeout_s=420)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy base "128" CUDAFLAGS=
export PYTHONPATH="/tmp/pkg_base/python:$SITE"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 100 > "$OUT/clocks.csv" 2>&1 &
smi=$!
mark() { echo "== $1 $(date +%T.%N | cut -c1-12)" | tee -a "$OUT/marks.txt"; }
mark "1 ab"
timed "1 ab causal 8k" 120 ab1.log $PY scripts/dev/bwd_ab.py --forward --causal yes --rounds 3 --dims 128 --seqlens 8192
tail -3 "$OUT/ab1.log"
mark "2 bench cell"
timed "2 bench cell" 150 bench_cell.log $PY -m flashsdpa bench --quick --sweep --rounds 3 --head-dims 128 --seqlens 8192 \
  --causal true --direction fwd --no-memory --no-overhead --no-plot --out "$OUT/bench_cell"
grep -A4 "fwd D=128 causal" "$OUT/bench_cell.log" | head -6
mark "3 bench quick"
timed "3 bench quick" 150 bench_quick.log $PY -m flashsdpa bench --quick --sweep --head-dims 128 --no-memory \
  --no-overhead --no-plot --out "$OUT/bench_quick"
grep -A4 "fwd D=128 causal" "$OUT/bench_quick.log" | head -6
mark "4 ab again"
timed "4 ab again" 120 ab4.log $PY scripts/dev/bwd_ab.py --forward --causal yes --rounds 3 --dims 128 --seqlens 8192
tail -3 "$OUT/ab4.log"
mark end
kill $smi 2>/dev/null
finish
