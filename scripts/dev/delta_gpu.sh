#!/usr/bin/env bash
# delta_gpu.sh: the backward preprocess's delta on the tensor cores (cuda/common/bwd_prepost.cuh)
# and the TMA encode's current context (cuda/sm90/tma_sm90.h), on the H200 (session 15): the
# default narrow build (bf16 + fp16, d64 / d128 / d256, both families); the one-hot gradient tests
# (dq, dk exactly 0 where a row sees one key, both families), the extreme-value and GPU fuzz files
# (the tied-keys and Sk = 1 cases the FMA chain failed) and the new-thread family test; memcheck
# on small fp16 backwards (d8 / 56 and d64 with Sk 1, d96, d128, d256: partial rows, Dv below the
# bucket, both families), which must report 0 errors (CUDA_ERROR_INVALID_CONTEXT is one). The
# session's A/B against the FMA chain built the old loop under a macro since removed (its numbers:
# docs/kernel_notes_bwd_sm90.md; the harness: scripts/dev/bwd_ab.py). Short table last; exits 1 if
# a step failed.
#   run(command="bash scripts/dev/delta_gpu.sh", carry=[".whl"], timeout_s=300)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 150 "64;128;256"
tests "one-hot, extreme, fuzz, thread" 150 tests.log $PY -m pytest -q -p no:cacheprovider -n 10 \
  tests/gpu/test_one_hot_grads.py tests/gpu/test_extreme.py tests/gpu/test_fuzz_gpu.py \
  "tests/gpu/test_streams.py::test_a_new_thread_gets_the_hopper_family"
cat > /tmp/delta_one.py <<'PYEOF'
import torch, flashsdpa
for dq, dv, sq, sk in ((8, 56, 27, 1), (64, 64, 70, 1), (128, 128, 130, 77), (96, 96, 65, 3), (256, 256, 100, 9)):
    q = torch.randn(2, 4, sq, dq, device="cuda", dtype=torch.float16, requires_grad=True)
    k = torch.randn(2, 1, sk, dq, device="cuda", dtype=torch.float16, requires_grad=True)
    v = torch.randn(2, 1, sk, dv, device="cuda", dtype=torch.float16, requires_grad=True)
    out = flashsdpa.attention(q, k, v)
    g = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    torch.cuda.synchronize(); print("ok", dq, dv, [float(t.float().abs().sum()) for t in g])
PYEOF
timed "memcheck backwards" 90 memcheck.log compute-sanitizer --tool memcheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY /tmp/delta_one.py
grep -E "Program hit|Invalid|^ok" "$OUT/memcheck.log" | head -8
finish
