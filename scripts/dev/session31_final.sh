#!/usr/bin/env bash
# session31_final.sh: the d256 tile as it lands (the losing switches removed; SASS differs from the
# measured builds by scheduling only): a bf16 + fp16 build of head dims 64 / 128 / 256, the whole GPU
# suite, memcheck and racecheck of test_kernels' sanitizer subset, the d256 backward sweep (3
# rounds, cuDNN and FA2 in the same process), and head dim 192 (now the sm90 256 tile's: 1.33x the
# work) against the portable family's own 192 bucket, 3 alternating rounds.
#   run(command="bash scripts/dev/session31_final.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 220 "64;128;192;256"
grep -A2 "bwd_sm90_kernel.*Li256ELi2ELNS_8ModsKindE0ELb0E" "$OUT/build.log" | grep -E "spill|registers" | head -4
tests "gpu tests" 250 tests.log $PY -m pytest tests/gpu -q -p no:cacheprovider -n 8
sanitize_subset memcheck 90 tests/gpu/test_kernels.py
sanitize_subset racecheck 100 tests/gpu/test_kernels.py
timed "bench bwd d256" 100 bench256.log $PY -m flashsdpa bench --sweep --direction bwd --head-dims 256 \
  --rounds 3 --no-memory --no-plot --no-overhead --out "$OUT/bench256"
tail -22 "$OUT/bench256.log"
for round in 0 1 2; do
  for fam in sm80 auto; do
    (( SECONDS > 560 )) && break 2
    if [[ $fam == sm80 ]]; then export FLASHSDPA_FAMILY=sm80; else unset FLASHSDPA_FAMILY; fi
    timeout 40 $PY scripts/dev/bwd_ab.py --rounds 1 --json --dims 192 --seqlens 2048 8192 --causal no \
      >> "$OUT/d192_$fam.jsonl" 2>> "$OUT/d192_$fam.err"
    check "d192 $fam $round" $?
  done
done
unset FLASHSDPA_FAMILY
tail -4 "$OUT/d192_sm80.jsonl" "$OUT/d192_auto.jsonl"
finish
