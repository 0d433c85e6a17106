#!/usr/bin/env bash
# bias_regs_ab.sh: the sm90 forward's bias kernels at a 32 / 232 producer / consumer register split
# (-DFLASHSDPA_SM90_FWD_BIAS_SPLIT32=1: 0 spills at d128 / d256 against 40 / 16 today; prepared in
# session 14, kernel_notes_fwd_sm90.md) against the default, on the H200. Two narrow builds (bf16,
# d128, both families) in fresh build directories, the second with the switch in CUDAFLAGS (CMake
# reads it on a first configure), each installed into its own copy of python/; the switched
# build's mask GPU tests (bf16 d128: the file's bias-kernel cases that build holds) and memcheck on
# one biased forward; then 6 rounds alternating one process per build of
# scripts/dev/bias_fwd_time.py (the bench's additive-bias row). Short table last; exits 1 if a step
# failed.
#   run(command="bash scripts/dev/bias_regs_ab.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy base 128 CUDAFLAGS=
build_copy split32 128 CUDAFLAGS=-DFLASHSDPA_SM90_FWD_BIAS_SPLIT32=1
grep -B1 "bytes spill stores" "$OUT/build_split32.log" | grep -E "ModsKindE2" | head -3
export PYTHONPATH="/tmp/pkg_split32/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
tests "mask tests (split32)" 240 tests.log $PY -m pytest -q -p no:cacheprovider -n 10 tests/gpu/test_masks_gpu.py
cat > /tmp/bias_one.py <<'PYEOF'
import torch, torch.nn.functional as F, flashsdpa
q, k, v = (torch.randn(2, 4, 700, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
bias = torch.randn(1, 4, 700, 700, device="cuda", dtype=torch.bfloat16)
with flashsdpa.enable():
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
torch.cuda.synchronize(); print("ok", float(out.float().abs().sum()))
PYEOF
timed "memcheck bias (split32)" 90 memcheck.log compute-sanitizer --tool memcheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY /tmp/bias_one.py
for round in 0 1 2 3 4 5; do
  for name in base split32; do
    PYTHONPATH="/tmp/pkg_$name/python" $PY scripts/dev/bias_fwd_time.py --seed $round | sed "s/^/$name /" >> "$OUT/ab.log"
  done
done
step "A/B rounds" "$(grep -c bias "$OUT/ab.log") lines"
$PY - "$OUT/ab.log" <<'PYEOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, _, _, fwd, _, bwd = line.split()
    rows.setdefault(name, []).append((float(fwd), float(bwd)))
for name, got in rows.items():
    print(f"{name:8s} fwd {statistics.median(f for f, _ in got):6.1f}  bwd {statistics.median(b for _, b in got):6.1f} TFLOP/s ({len(got)} rounds)")
if len(rows) == 2:
    a, b = rows["base"], rows["split32"]
    print("split32 / base fwd", round(statistics.median(y[0] / x[0] for x, y in zip(a, b)), 4),
          "bwd", round(statistics.median(y[1] / x[1] for x, y in zip(a, b)), 4))
PYEOF
finish
