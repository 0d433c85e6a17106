#!/usr/bin/env bash
# session38_fifth.sh (session 38), one call, ~6 minutes: the user-facing rows not measured since
# session 32 (H200): the bench's model rows (3 interleaved rounds) and shim_cost.py (issue 9's
# per-call and small-step rows), on the tree, bf16 d64 / d128 (every attention call of the rows).
# Prediction (H100; the forward is +0-6% since session 32, the backward and shim unchanged):
# enable() / default 0.96-1.0 on every row; small train bf16 within +-2% of FA2 only; shim per-call
# rows within +-2 us of session 32's.
#   run(command="bash scripts/dev/session38_fifth.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy models "64;128"
require_copies models
export PYTHONPATH="/tmp/pkg_models/python${SITE:+:$SITE}"
# session38_fourth.sh's racecheck of test_kvcache's subset stopped on "Internal Sanitizer Error"
# in the append case's PyTorch reference (_pt), on the prefetch build: the tree's the same?
sanitize_subset racecheck 90 tests/gpu/test_kvcache.py
grep -E "Internal Sanitizer|RACECHECK SUMMARY|line [0-9]+ in " "$OUT/san_racecheck.log" | head -6
timed "bench --models" 300 models.log $PY -m flashsdpa bench --models --rounds 3 --out /tmp/models_out
sed -n '/^Models/,/^  (?/p' "$OUT/models.log" | head -60
grep -E "^  models|PASS|FAIL" "$OUT/models.log" | head -30
timed "shim cost" 200 shim_cost.log $PY scripts/dev/shim_cost.py --rounds 5 --calls 500
tail -30 "$OUT/shim_cost.log"
finish
