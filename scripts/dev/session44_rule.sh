#!/usr/bin/env bash
# session44_rule.sh (prepared in session 44, not yet run: no machine came), ~5-6 minutes: the d64
# grouped rule's runtime form alone, for a call with little device time left
# (session43_combined.sh's SHORT=2 still builds d128 and its variant): one bf16 + fp16 d64 build of
# the tree; test_kernels.py and test_windows.py with FLASHSDPA_SM90_BWD_GROUP=auto (the rule),
# memcheck with k = 3; then 3 alternating process rounds of bwd_ab.py at d64, k = 1 (the plain
# kernel) against auto (the rule) on the same build.
# Prediction (H100; kernel_notes_bwd_sm90.md, session 42's outcome): rule / k1 S 512 +8%, causal
# +13%; 1k +5%, causal +22%; 2k +2%, causal +7%; 8k 1.00, causal +1-3%.
#   run(command="bash scripts/dev/session44_rule.sh", carry=[".whl"], timeout_s=400)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16;fp16" BUILD_TIMEOUT=150 build_copy r "64"
TEST_LIMIT=${TEST_LIMIT:-100}  # TESTK="expr": only those tests
require_copies r
R="/tmp/pkg_r/python${SITE:+:$SITE}"
FLASHSDPA_SM90_BWD_GROUP=auto PYTHONPATH="$R" tests "gpu tests (rule)" "$TEST_LIMIT" tests_r.log \
  $PY -m pytest tests/gpu/test_kernels.py tests/gpu/test_windows.py -q -p no:cacheprovider -n 8 ${TESTK:+-k "$TESTK"}
# SAN=0: no memcheck (a call with under ~5 minutes: session 42 ran both sanitizers on the compile-time form)
((${SAN:-1})) && FLASHSDPA_SM90_BWD_GROUP=3 PYTHONPATH="$R" sanitize_subset memcheck 45 tests/gpu/test_kernels.py
((${#failed[@]})) && finish
for round in 0 1 2; do
  for spec in "k1 1" "auto auto"; do
    read -r name k <<< "$spec"
    (( SECONDS > ${AB_STOP:-370} )) && break 2
    FLASHSDPA_SM90_BWD_GROUP=$k PYTHONPATH="$R" timeout 40 $PY scripts/dev/bwd_ab.py --rounds 1 --json --dims 64 \
      --causal both --seqlens 512 1024 2048 8192 >> "$OUT/ab_$name.jsonl" 2>> "$OUT/ab_$name.err"
    check "A/B $name round $round" $?
  done
done
echo "A/B ended at $SECONDS s"
$PY scripts/dev/ab_table.py "$OUT" k1 auto > "$OUT/ab_table.txt"
cat "$OUT/ab_table.txt"
finish
