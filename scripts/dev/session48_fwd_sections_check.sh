#!/usr/bin/env bash
# session48_fwd_sections_check.sh (session 48), one call, ~4 minutes: the wave-section rule
# (fwd_kernel_sm90.cuh's sched_group: one wave's worth of pairs a section at <= 4 query blocks a
# head) as built, against the build before it (scripts/dev/ab/old_*.cuh swapped in): the schedule
# and many-tiles tests (two new wave-section cases), memcheck / racecheck of their sanitizer subsets,
# then 3 alternating process rounds of bwd_ab.py --forward, causal, S 256 / 384 / 512 (the rule's
# cells) and 1k (unchanged by construction: 8 blocks). Prediction: d128 S 512 +11-14% (the knob's
# A/B: 1.139), d64 S 512 +3-5%, d256 ~1.00, S 256 / 384 (2-3 blocks) +5-15% at d128, 1k 1.00.
# The old files are session 47's tree (9105a87), written before the call and removed after it:
#   git show 9105a87:cuda/sm90/fwd_kernel_sm90.cuh > scripts/dev/ab/old_fwd_kernel_sm90.cuh
#   git show 9105a87:cuda/sm90/fwd_launch_sm90.cuh > scripts/dev/ab/old_fwd_launch_sm90.cuh
#   run(command="bash scripts/dev/session48_fwd_sections_check.sh", carry=[".whl"], timeout_s=420)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16" build_copy rule "64;128;256"
BUILD_DTYPES="bf16" swap_build old cuda/sm90/fwd_kernel_sm90.cuh scripts/dev/ab/old_fwd_kernel_sm90.cuh "64;128;256" \
  cuda/sm90/fwd_launch_sm90.cuh scripts/dev/ab/old_fwd_launch_sm90.cuh
require_copies rule old
R="/tmp/pkg_rule/python${SITE:+:$SITE}"
PYTHONPATH="$R" tests "schedule + many tiles" 120 tests.log \
  $PY -m pytest tests/gpu/test_fwd_schedule.py tests/gpu/test_fwd_many_tiles.py -q -p no:cacheprovider -n 4
for tool in memcheck racecheck; do
  PYTHONPATH="$R" sanitize_subset $tool 60 tests/gpu/test_fwd_many_tiles.py
done
((${#failed[@]})) && finish
AB_STOP=${AB_STOP:-380} bwd_ab_rounds 3 "old rule" --forward --dims 128 64 256 --causal yes --seqlens 256 384 512 1024
finish
