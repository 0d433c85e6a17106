#!/usr/bin/env bash
# session32_second.sh: the measurements sessions 30 and 31 left (the tree's kernels are cb82305's,
# SASS byte-identical): the zero-batch probe (issue 10: is SDPA's None for a zero batch outside
# enable() PyTorch's own?), the model rows (3 rounds; issues 9, 12, 13), the shim's per-call cost
# (issue 9's 2 us bars), then ncu of the GQA 16/4 8k forward (ours 0.948x cuDNN in session 32's
# A/B, non-causal; its gap is not L2-slice contention: the CTA pairs did not move it), ours and
# cuDNN's (B 1 H 16/4, the A/B's cell), as time allows.
#   run(command="bash scripts/dev/session32_second.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 200 "64;128"
timed "probe, no import" 60 probe_noimport.log $PY scripts/dev/bad_inputs_probe.py --no-import
cat "$OUT/probe_noimport.log"
timed "probe" 60 probe.log $PY scripts/dev/bad_inputs_probe.py
cat "$OUT/probe.log"
timed "bench models" 220 bench_models.log $PY -m flashsdpa bench --models --rounds 3 --no-plot --out "$OUT/bench_models"
tail -45 "$OUT/bench_models.log"
timed "shim cost" 90 shim_cost.log $PY scripts/dev/shim_cost.py --rounds 5 --calls 500
tail -30 "$OUT/shim_cost.log"
# Is the GQA cell's gap its grouping or its batch (1024 tiles: 7.8 rounds and a split tail)?
timed "gqa probe" 60 gqa_probe.log $PY scripts/dev/bwd_ab.py --forward --rounds 3 --causal no \
  --shapes 1:16:16:8192:128 1:16:4:8192:128 2:16:4:8192:128 2:16:16:8192:128 1:16:1:8192:128
cat "$OUT/gqa_probe.log"
if (( SECONDS < 330 )); then
  ncu_kernel gqa_ours flashsdpa_fwd_sm90_kernel 80 $PY scripts/dev/fwd_profile.py 128 8192 0 4 1
fi
if (( SECONDS < 420 )); then
  ncu_kernel gqa_cudnn sdpa_sm90_flash_fprop 80 $PY scripts/dev/fwd_profile.py 128 8192 0 4 1
  ncu_compare gqa_ours gqa_cudnn
fi
finish
