#!/usr/bin/env bash
# session27_third.sh (after session27_second.sh, same build): the d64 forward's three kernels at
# small_graph_times.py's d64 shapes, CUDA-graph GPU us a call, 2 interleaved rounds of four
# configurations of one build: the rules (default), FLASHSDPA_FAMILY=sm90 (the short tile where
# fwd_sm90_short_tile picks it, never the portable family), FLASHSDPA_SPEED_RULES=0 (the 192-row
# tile always), FLASHSDPA_FAMILY=sm80 (the portable family); then PyTorch's backends once.
#   run(command="bash scripts/dev/session27_third.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
narrow_build 170 "64;128"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
G="$PY scripts/dev/small_graph_times.py --only-ours --dims 64 --rounds 9"
for round in 1 2; do
  timed "rules $round" 50 g_rules_$round.log $G --check
  FLASHSDPA_FAMILY=sm90 timed "sm90 short $round" 50 g_short_$round.log $G --check
  FLASHSDPA_SPEED_RULES=0 timed "sm90 192 $round" 50 g_192_$round.log $G
  FLASHSDPA_FAMILY=sm80 timed "sm80 $round" 50 g_sm80_$round.log $G
done
timed "torch backends" 90 g_torch.log $PY scripts/dev/small_graph_times.py --dims 64 --rounds 9
(cd "$OUT" && echo "rules | short | 192 | sm80 (round 1, then round 2)" && for r in 1 2; do
  paste -d' ' <(grep -E "^ *[0-9]" g_rules_$r.log) <(grep -E "^ *[0-9]" g_short_$r.log | awk '{print $NF}') \
    <(grep -E "^ *[0-9]" g_192_$r.log | awk '{print $NF}') <(grep -E "^ *[0-9]" g_sm80_$r.log | awk '{print $NF}'); done)
grep -E "^ *[0-9]|GPU us|^  B|FAIL" "$OUT/g_torch.log"
grep -h FAIL "$OUT"/g_*.log
finish
