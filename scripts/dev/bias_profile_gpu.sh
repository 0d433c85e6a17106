#!/usr/bin/env bash
# bias_profile_gpu.sh: one device call: one-configuration build (bf16 d128), bias_profile.py, then
# ncu on the bias forward kernel (speed of light, memory, warp stalls).
#   run(command="bash scripts/dev/bias_profile_gpu.sh", carry=[".whl"], timeout_s=400)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
t0=$(date +%s)
FLASHSDPA_BUILD_DIR=/tmp/narrow_build FLASHSDPA_DTYPES=bf16 FLASHSDPA_HEAD_DIMS=128 FLASHSDPA_ARCHS=90 \
  FLASHSDPA_BUILD_JOBS="$(nproc)" timeout 200 $PY setup.py build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
step build "ok in $(( $(date +%s) - t0 )) s"
timed "bias_profile" 120 prof.log $PY scripts/dev/bias_profile.py
cat "$OUT/prof.log"
timed "ncu" 150 ncu.log ncu --kernel-name regex:flashsdpa_fwd --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  $PY -c "
import torch, flashsdpa
q,k,v=(torch.randn(8,16,2048,128,device='cuda',dtype=torch.bfloat16) for _ in range(3))
b=torch.randn(1,16,2048,2048,device='cuda',dtype=torch.bfloat16)
with torch.no_grad():
    for _ in range(5): flashsdpa.attention(q,k,v,attn_mask=b)
torch.cuda.synchronize()"
grep -vE "^==PROF==|^\s*$|----" "$OUT/ncu.log" | cut -c1-150 | tail -75
finish
