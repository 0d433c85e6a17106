#!/usr/bin/env bash
# session37_fourth.sh: (1) the sm90 forward's tile epilogue in phases (issue 12): session37_second's
# timeline put ~2,000 cycles on the epilogue and ~640 on the hand-over to the next tile, per
# warpgroup and tile at every S (d128 S 512: 2,031 + 635 of a 15,112-cycle tile period; the
# tensor cores idle under most of it). New stamps split them: finalize, the O slot's wait + sync,
# staging O + fence + sync, the TMA store's issue, the LSE store, the queue pop, the tile's setup.
# Prediction: staging O (32 st.shared per thread at d128) + its two syncs ~600, finalize ~150
# (logf, the reciprocal), the rest small; if so, ~1,000 cycles are not explained by the code's work.
# (2) issue 9's attention-only small step (B 8 H 16 S 256 D 64 bf16, fwd + bwd) captured in CUDA
# graphs: the GPU's own time a step per variant, 3 interleaved rounds (the profiler's kernel sum
# overstates ours: the programmatic dQ postprocess's duration includes its wait on the GPU).
# Prediction: flashsdpa ~50 us causal (FA2 ~62, cuDNN ~45); the portable family ~49.
#   run(command="bash scripts/dev/session37_fourth.sh", carry=[".whl"], timeout_s=300)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
if dev_build fwd_tl /tmp/fwd_tl -DFLASHSDPA_SM90_FWD_TIMELINE=1 scripts/dev/fwd_timeline.cu cuda/sm90/tiles_sm90.cu; then
  for cell in "128 512 0" "64 512 0" "128 8192 0"; do
    timed "timeline d${cell// /_}" 60 "tl_${cell// /_}.log" /tmp/fwd_tl $cell 0 77
  done
  cat "$OUT"/tl_*.log
fi
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 240 "64;128"
timed "small step graph" 120 graph.log $PY scripts/dev/small_step_kernels.py --graph
timed "small step graph, non-causal" 120 graph_nc.log $PY scripts/dev/small_step_kernels.py --graph --no-causal
FLASHSDPA_FAMILY=sm80 timed "small step graph, portable" 60 graph_sm80.log \
  $PY scripts/dev/small_step_kernels.py --graph --only-ours
FLASHSDPA_FAMILY=sm80 timed "small step graph, portable, non-causal" 60 graph_nc_sm80.log \
  $PY scripts/dev/small_step_kernels.py --graph --only-ours --no-causal
cat "$OUT"/graph*.log
finish
