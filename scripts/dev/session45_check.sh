#!/usr/bin/env bash
# session45_check.sh, one call, ~3 minutes: the d64 grouped rule as the default (no
# FLASHSDPA_SM90_BWD_GROUP: bwd_launch_sm90.cuh's rule, causal bound 16 since session 45) on a
# bf16 + fp16 d64 build: test_kernels, the fuzz file (its D 8 / Dv 16 example that session 45's
# first call failed: tests/helpers.py's efficient-kernel yardstick) and the windows; the failing
# example's errors, ours against PyTorch's math / efficient kernel, into fuzz_diag.txt; memcheck on
# the sanitizer subset. The d256 grouped check and A/B are session43_d256_grouped.sh's (a second
# call on the warm machine).
#   run(command="bash scripts/dev/session45_check.sh", carry=[".whl"], timeout_s=240)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
unset FLASHSDPA_SM90_BWD_GROUP
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16;fp16" build_copy r45 "64"
require_copies r45
R="/tmp/pkg_r45/python${SITE:+:$SITE}"
PYTHONPATH="$R" tests "gpu tests (default rule)" "${TEST_LIMIT:-150}" tests_r45.log \
  $PY -m pytest tests/gpu/test_kernels.py tests/gpu/test_fuzz_gpu.py tests/gpu/test_windows.py -q -p no:cacheprovider -n 8
PYTHONPATH="$R:tests" timeout 60 $PY - > "$OUT/fuzz_diag.txt" 2>&1 <<'PYEOF'
import torch
import flashsdpa
from helpers import (Shape, default_scale, make_qkv, max_error, textbook_with_grads, torch_math_attention,
                     grads_or_zeros, torch_efficient_grads)
shape = Shape("fuzz", 1, 1, 1, 1, 2, 8, 16)
misses = {"ours": 0, "efficient": 0}
for seed in range(64):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = make_qkv(shape, torch.bfloat16, "cuda", generator=gen)
    for t in (q, k, v):
        t.requires_grad_()
    scale = default_scale(8)
    out = flashsdpa.attention(q, k, v, scale=scale)
    dout = torch.randn(out.shape, generator=gen, device="cuda").to(torch.bfloat16)
    ours = torch.autograd.grad(out, (q, k, v), dout)
    _, _, ref = textbook_with_grads(q, k, v, dout, scale=scale, causal_mode=0)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    pt = grads_or_zeros(torch_math_attention(*leaves, scale=scale, causal_mode=0, reduced_precision=True), leaves, dout)
    eff = torch_efficient_grads(q, k, v, dout, scale=scale, causal_mode=0)
    rows = []
    for name, o, p, e, r in zip(("dq", "dk", "dv"), ours, pt, eff or [None] * 3, ref):
        eo, ep = max_error(o, r), max_error(p, r)
        ee = max_error(e, r) if e is not None else float("nan")  # (nan: the efficient kernel refused it)
        misses["ours"] += eo > 2 * ep + 1e-5
        misses["efficient"] += ee > 2 * ep + 1e-5
        rows.append(f"{name} ours {eo:.2e} math {ep:.2e} eff {ee:.2e}")
    if seed < 8:
        print(seed, "; ".join(rows))
print("first-clause misses over 64 seeds x 3 grads:", misses)
PYEOF
check "fuzz diag" $?
step "fuzz diag" "$(tail -1 "$OUT/fuzz_diag.txt")"
FLASHSDPA_SM90_BWD_GROUP=3 PYTHONPATH="$R" sanitize_subset memcheck 45 tests/gpu/test_kernels.py
# (session 46) what cuDNN launches at S 512 (forward and backward, causal and not: its tile in the
# generated name), where issue 12's causal cells stand at 0.83x.
PYTHONPATH="$R" timeout 60 $PY scripts/dev/bwd_launch_spy.py --dims 128 64 --seqlen 512 > "$OUT/spy512.txt" 2>&1
grep -E "cudnn" "$OUT/spy512.txt" | cut -c1-230
finish
