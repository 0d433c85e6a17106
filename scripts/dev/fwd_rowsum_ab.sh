#!/usr/bin/env bash
# fwd_rowsum_ab.sh (session 19, prepared without device time; for the next session): the sm90
# forward's row sums on the tensor pipe (-DFLASHSDPA_SM90_FWD_TENSOR_ROWSUM=1: P times a ones atom,
# m64n8k16 beside each P V k-step, instead of the exponent loop's FADDs; kernel_notes_fwd_sm90.md,
# "Next: the row sums on the tensor pipe") against today's kernel. Builds (bf16 d128): base, rs.
# ptxas 13.0 on rs: 0 spills, no C75xx; the plain kernel's SASS: HGMMA 32 -> 48 (16 HGMMA.64x8x16),
# FADD 296 -> 152; the default build's SASS byte-identical to the suite-tested tree. Then the rs
# build's forward tests (test_kernels, the extremes' NaN / inf patterns and huge logits, masks,
# the split tail, the schedule), memcheck and racecheck of a small forward, and 3 rounds alternating
# one process per build of `bwd_ab.py --forward` (S 2k / 8k, causal or not, the Llama GQA shapes).
# Prediction: -3% to +4% (the width: small-N wgmma's unknown issue cost). Table last.
#   run(command="bash scripts/dev/fwd_rowsum_ab.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy base "128" CUDAFLAGS=
build_copy rs "128" CUDAFLAGS=-DFLASHSDPA_SM90_FWD_TENSOR_ROWSUM=1
PYTHONPATH="/tmp/pkg_rs/python:$PWD/tests:$SITE" tests "tests rs" 170 tests_rs.log $PY -m pytest -q \
  -p no:cacheprovider -n 12 tests/gpu/test_kernels.py tests/gpu/test_extreme.py tests/gpu/test_masks_gpu.py \
  tests/gpu/test_split_tail.py tests/gpu/test_fwd_schedule.py
cat > /tmp/fwd_small.py <<'PYEOF'
import torch, flashsdpa
for causal in (False, True):
    q = torch.randn(2, 8, 1000, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(2, 2, 777, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = flashsdpa.attention(q, k, v, causal=causal)
torch.cuda.synchronize(); print("ok", float(out.float().abs().sum()))
PYEOF
for tool in memcheck racecheck; do
  PYTHONPATH="/tmp/pkg_rs/python:$SITE" timed "$tool rs" 90 ${tool}_rs.log \
    compute-sanitizer --tool $tool --kernel-name kns=flashsdpa --error-exitcode 1 $PY /tmp/fwd_small.py
done
ab_rounds "base rs" 60 --forward --dims 128 --seqlens 2048 8192
finish
