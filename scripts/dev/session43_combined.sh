#!/usr/bin/env bash
# session43_combined.sh (prepared in session 43, not yet run: twelve refused or lost starts), ~8
# minutes: the d64 grouped rule's runtime form (session 42's fourth script, folded in here: tests
# with FLASHSDPA_SM90_BWD_GROUP=auto, sanitizers with k = 3, the rule against k = 1 on one build)
# and the d128 grouped kernel (FLASHSDPA_SM90_BWD_GROUP_D128=1, with the producer's 92 bytes of
# spills; forced k only) on one bf16 + fp16 d64 / d128 build. d256's grouping has its own script
# (session43_d256_grouped.sh).
# A/B, 3 alternating rounds, one process per copy and round: k1 (the plain kernels, d64 and d128),
# auto (d64: the rule), k2 and k4 (d128).
# Predictions (H100; kernel_notes_bwd_sm90.md): d64 rule / k1: S 512 +8%, causal +13%; 1k +5%,
# causal +22%; 2k +2%, causal +7%; 8k 1.00, causal +1-3%. d128 k2 or k4 / k1: causal 512 / 1k
# +10-18%, dense 512 / 1k +3-6%, 2k +1-3%, 8k within 1% (k2) or lower (k4).
#   run(command="bash scripts/dev/session43_combined.sh", carry=[".whl"], timeout_s=590)
# A call with little device time left: SHORT=2 (the d64 rule alone, on a d64 build without the d128
# variant: ~5-6 minutes), FUZZ= (skip the fuzz file), SAN_TOOLS=memcheck (or "" for none),
# TEST_LIMIT (s), TESTK="expr", AB_STOP (s); e.g. a ~4-minute call:
#   SHORT=2 FUZZ= SAN_TOOLS= TEST_LIMIT=80 AB_STOP=200 bash scripts/dev/session43_combined.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export FLASHSDPA_SM90_BWD_GROUP=auto  # the rule, for the tests (the A/B sets each side's)
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
GROUPED_DIMS=64,128  # the grouped test rows' head dims (tests/gpu/test_kernels.py; its default 64,256)
if ((${SHORT:-0} == 2)); then
  BUILD_DTYPES="bf16;fp16" build_copy g "64" && GROUPED_DIMS=64
else
  BUILD_DTYPES="bf16;fp16" build_copy g "64;128" "CUDAFLAGS=-DFLASHSDPA_SM90_BWD_GROUP_D128=1"
fi
require_copies g
grep -A2 "Compiling entry.*bwd_sm90_kernel.*Lb1EEEE" "$OUT/build_g.log" | grep -E "spill" | sort | uniq -c
G="/tmp/pkg_g/python${SITE:+:$SITE}"
SELECT=()  # TESTK="expr": only those tests (a call with little device time left)
[[ -n "${TESTK:-}" ]] && SELECT=(-k "$TESTK")
PYTHONPATH="$G" FLASHSDPA_TEST_GROUPED_DIMS=$GROUPED_DIMS tests "gpu tests (rule, grouped)" "${TEST_LIMIT:-150}" tests_g.log \
  $PY -m pytest tests/gpu/test_kernels.py ${FUZZ-tests/gpu/test_fuzz_gpu.py} tests/gpu/test_windows.py -q -p no:cacheprovider -n 8 \
  "${SELECT[@]}"
for tool in ${SAN_TOOLS-memcheck racecheck}; do
  FLASHSDPA_SM90_BWD_GROUP=3 PYTHONPATH="$G" sanitize_subset $tool 45 tests/gpu/test_kernels.py
done
((${#failed[@]})) && finish
# SPECS: "copy k dims seqlens", one process each a round (SHORT=1: d64 k1 / auto and d128 k1 / k2
# only, d128 without 8k: what a call with little device time left can fit in three rounds).
SPECS=("k1 1 64,128 512,1024,2048,8192" "auto auto 64 512,1024,2048,8192" "k2 2 128 512,1024,2048,8192"
  "k4 4 128 512,1024,2048,8192")
((${SHORT:-0} == 2)) && SPECS=("k1 1 64 512,1024,2048,8192" "auto auto 64 512,1024,2048,8192")
((${SHORT:-0} == 1)) && SPECS=("k1 1 64 512,1024,2048,8192" "auto auto 64 512,1024,2048,8192" "d1 1 128 512,1024,2048"
  "k2 2 128 512,1024,2048")
for round in 0 1 2; do
  for spec in "${SPECS[@]}"; do
    read -r name k dims seqlens <<< "$spec"
    (( SECONDS > ${AB_STOP:-540} )) && break 2
    FLASHSDPA_SM90_BWD_GROUP=$k PYTHONPATH="$G" timeout 60 $PY scripts/dev/bwd_ab.py \
      --rounds 1 --json --dims ${dims//,/ } --causal both --seqlens ${seqlens//,/ } >> "$OUT/ab_$name.jsonl" 2>> "$OUT/ab_$name.err"
    check "A/B $name round $round" $?
  done
done
echo "A/B ended at $SECONDS s"
if ((${SHORT:-0} == 2)); then
  $PY scripts/dev/ab_table.py "$OUT" k1 auto > "$OUT/ab_table.txt"
elif ((${SHORT:-0})); then
  { $PY scripts/dev/ab_table.py "$OUT" k1 auto; $PY scripts/dev/ab_table.py "$OUT" d1 k2; } > "$OUT/ab_table.txt"
else
  $PY scripts/dev/ab_table.py "$OUT" k1 auto k2 k4 > "$OUT/ab_table.txt"
fi
cat "$OUT/ab_table.txt"
finish
