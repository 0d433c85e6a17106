#!/usr/bin/env bash
# fwd_order_ab.sh (session 18, prepared without device time; for a later session): the sm90
# forward's tile order for long causal problems. Today (base) they take the static block-major
# order: at 8k d128 every (head, batch) pair's K/V is in flight at once, ncu read a 65.7% L2 hit
# rate and 4.4x the minimum DRAM bytes (issue 12's ncu bar: >= 90%, DRAM close to Q + K + V).
# Builds (bf16 d128): dyn32 (the dynamic counter order for every causal size,
# -DFLASHSDPA_SM90_FWD_MAX_DYNAMIC_BLOCKS=1000000, today's 32 MB sections: session 9's 0.95-0.98x
# at 8k on an older kernel) and dyn8 (8 MB sections: ~4 pairs in flight at 8k). Per build: ncu's
# L2 hit rate, DRAM bytes and duration on the causal 8k cell; the schedule tests; then 3 rounds
# alternating one process per build of `bwd_ab.py --forward --causal yes` (S 4k / 8k / 16k, the
# Llama GQA shapes). A simulation of the orders (kernel_notes_fwd_sm90.md, "The causal order and
# L2") predicts equal balance (0.999) for both dynamic builds. Table last.
#   run(command="bash scripts/dev/fwd_order_ab.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy base "128" CUDAFLAGS=
build_copy dyn32 "128" CUDAFLAGS=-DFLASHSDPA_SM90_FWD_MAX_DYNAMIC_BLOCKS=1000000
build_copy dyn8 "128" "CUDAFLAGS=-DFLASHSDPA_SM90_FWD_MAX_DYNAMIC_BLOCKS=1000000 -DFLASHSDPA_SM90_FWD_L2_SECTION_MB=8"
SITE="${PYTHONPATH:-}"
PYTHONPATH="/tmp/pkg_dyn8/python:$PWD/tests:$SITE" tests "tests dyn8" 150 tests_dyn8.log $PY -m pytest -q \
  -p no:cacheprovider -n 12 tests/gpu/test_fwd_schedule.py tests/gpu/test_kernels.py tests/gpu/test_masks_gpu.py
METRICS=gpu__time_duration.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum
for name in base dyn32 dyn8; do
  PYTHONPATH="/tmp/pkg_$name/python:$SITE" timed "ncu $name" 90 ncu_$name.log ncu --clock-control none \
    --metrics $METRICS --kernel-name regex:flashsdpa_fwd_sm90_kernel --launch-skip 1 --launch-count 1 \
    $PY scripts/dev/fwd_profile.py 128 8192 1
  grep -E "gpu__time|hit_rate|dram__bytes" "$OUT/ncu_$name.log"
done
for round in 0 1 2; do
  for name in base dyn32 dyn8; do
    (( SECONDS > 550 )) && break 2
    PYTHONPATH="/tmp/pkg_$name/python:$SITE" timeout 60 $PY scripts/dev/bwd_ab.py --forward --causal yes --rounds 1 \
      --json --dims 128 --seqlens 4096 8192 16384 >> "$OUT/ab_$name.jsonl" 2>> "$OUT/ab_$name.err"
    check "A/B $name round $round" $?
  done
done
echo "A/B ended at $SECONDS s"
$PY scripts/dev/ab_table.py "$OUT" base dyn32 dyn8
finish
