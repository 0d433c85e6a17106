#!/usr/bin/env bash
# session48_fwd_sections.sh (session 48), one call, ~5 minutes: the dynamic causal order's section
# size (issue 12's causal S 512 cells: d128 0.85x cuDNN, d64 0.84x, d256 0.91x). The tile timeline
# (session48_fwd_causal_tl.sh, H100, d128 S 512 causal, CTA 0) has the 4-block tiles at 20-22k
# cycles against 14.5k for a non-causal 4-block tile, the 3 / 2 / 1-block ones near their blocks'
# worth: with 32 MB sections (128 pairs at S 512) a section's first wave starts 128 new pairs at
# once, each streaming its 256 KB of K / V from DRAM (~3 TB/s for ~11 us), and the later waves find
# them in L2 with DRAM idle. A fluid model (132 CTAs, DRAM shared: scripts/dev/fwd_dram_sim.py)
# gives 201.7k cycles for today's sections against 173-177k for 16-66 pairs (-13%), and -10% at
# 1k, ~0 at 2k (whose sections are 32 pairs already), nothing at 8k. FLASHSDPA_SM90_FWD_SECTION
# (fwd_launch_sm90.cuh at the time of this call, a dev knob read per launch; the
# rule replaced it) sets it on one build: -k = k waves' worth of
# pairs (k x ceil(grid / query blocks)), capped by the L2 rule. Prediction (3 alternating process
# rounds of bwd_ab.py --forward, causal): w1 / w2 against the tree d128 S 512 +8-14%, 1k +5-10%, 2k
# +-2%, 8k within 2% (w1 may lose there: 3 pairs a section, the 8 MB-section loss of session 19);
# d64 / d256 alike at S 512 / 1k. First the schedule's and many-tiles' tests at w1 and at 1 pair.
#   run(command="bash scripts/dev/session48_fwd_sections.sh", carry=[".whl"], timeout_s=480)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16" build_copy sec "64;128;256"
require_copies sec
export PYTHONPATH="/tmp/pkg_sec/python${SITE:+:$SITE}"
for n in -1 1; do
  FLASHSDPA_SM90_FWD_SECTION=$n tests "schedule tests, section $n" 90 "tests_sec$n.log" \
    $PY -m pytest tests/gpu/test_fwd_schedule.py tests/gpu/test_fwd_many_tiles.py -q -p no:cacheprovider -n 4
done
((${#failed[@]})) && finish
SPECS=("tree" "w1 -1" "w2 -2")
for round in 0 1 2; do
  for spec in "${SPECS[@]}"; do
    read -r name n <<< "$spec"
    (( SECONDS > ${AB_STOP:-420} )) && break 2
    env ${n:+FLASHSDPA_SM90_FWD_SECTION=$n} timeout 90 $PY scripts/dev/bwd_ab.py --forward --rounds 1 --json \
      --dims 128 64 256 --causal yes --seqlens 512 1024 2048 8192 >> "$OUT/ab_$name.jsonl" 2>> "$OUT/ab_$name.err"
    check "A/B $name round $round" $?
  done
done
echo "A/B ended at $SECONDS s"
$PY scripts/dev/ab_table.py "$OUT" tree w1 w2 | tee "$OUT/ab_table.txt"
finish
