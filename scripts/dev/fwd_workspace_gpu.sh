#!/usr/bin/env bash
# fwd_workspace_gpu.sh: session 13's third device call, after the forward's workspace took over the
# dynamic schedule's counter (per call, zeroed by the launcher: SDPA's C++ routers and CUDA graphs
# get the dynamic schedule too). Narrow build (bf16 + fp16, d64 / d128 / d256, both families), the
# whole GPU suite, the A/B of the training forward (scripts/dev/fwd_workspace_ab.py), memcheck on a
# dynamic launch, the model rows. Short table last; exits 1 if a step failed (issue 10's extreme
# tie case and the fuzz case are known failures).
#   run(command="bash scripts/dev/fwd_workspace_gpu.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 150 "64;128;256"
tests "GPU suite" 230 suite.log $PY -m pytest -q -p no:cacheprovider -n 10 tests/gpu
timed "A/B workspace (grad)" 100 ab.log $PY scripts/dev/fwd_workspace_ab.py --rounds 3
cat > /tmp/dyn_one.py <<'PYEOF'
import torch, flashsdpa
q, k, v = (torch.randn(4, 16, 2048, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
with flashsdpa.enable():
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
torch.cuda.synchronize(); print("ok", float(out.float().abs().sum()))
PYEOF
timed "memcheck dynamic" 60 memcheck.log compute-sanitizer --tool memcheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY /tmp/dyn_one.py
timed "bench models" 150 bench_models.log $PY -m flashsdpa bench --models --out "$OUT/bench_models"
grep -E "^(FAILED|ERROR) " "$OUT"/suite.log | cut -c1-200 | head -12
grep -E "ERROR SUMMARY" "$OUT"/memcheck.log
tail -9 "$OUT/ab.log"
echo "==== bench models"; tail -22 "$OUT/bench_models.log"
finish
