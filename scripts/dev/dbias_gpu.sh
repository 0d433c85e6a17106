#!/usr/bin/env bash
# dbias_gpu.sh: session 13's fifth device call: the dense bias gradient left unfilled where the
# kernels store every element (unmasked, no summary: ops_masks.dense_grad). Narrow build, the masks'
# GPU tests (test_masks_gpu.py poisons the unfilled buffer with NaN; the skip and summary tests),
# memcheck on an unmasked bias backward, `bench --masks` (3 rounds). Short table last; exits 1 if a
# step failed.
#   run(command="bash scripts/dev/dbias_gpu.sh", carry=[".whl"], timeout_s=500)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 150 "64;128;256"
tests "masks GPU tests" 200 masks.log $PY -m pytest -q -p no:cacheprovider -n 10 tests/gpu/test_masks_gpu.py \
  tests/gpu/test_mask_skip_gpu.py tests/gpu/test_bias_cells_gpu.py tests/gpu/test_masked_decode_gpu.py tests/gpu/test_features_gpu.py
cat > /tmp/dbias_one.py <<'PYEOF'
import torch, flashsdpa
q, k, v = (torch.randn(2, 4, 300, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
m = torch.randn(1, 4, 300, 300, device="cuda", dtype=torch.bfloat16, requires_grad=True)
out = flashsdpa.attention(q, k, v, attn_mask=m)
out.sum().backward(); torch.cuda.synchronize(); print("ok", float(m.grad.float().abs().sum()))
PYEOF
timed "memcheck bias bwd" 60 memcheck.log compute-sanitizer --tool memcheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY /tmp/dbias_one.py
timed "bench masks" 120 bench_masks.log $PY -m flashsdpa bench --masks --out "$OUT/bench_masks"
grep -E "^(FAILED|ERROR) " "$OUT"/masks.log | cut -c1-200 | head -12
grep -E "ERROR SUMMARY" "$OUT"/memcheck.log
echo "==== bench masks"; tail -26 "$OUT/bench_masks.log"
finish
