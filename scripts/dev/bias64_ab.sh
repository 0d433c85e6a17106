#!/usr/bin/env bash
# (Ran in session 17, call 1: 128 / 192 = 1.019 forward, so 128 rows became the d64 bias tile and
# the macro went in 5c866b1; this script builds two identical kernels since. Its run: be8e905.)
# bias64_ab.sh (prepared in session 16 without device time; to run in the next): the sm90 forward's
# d64 bias kernel at 128 query rows, two consumer warpgroups at 32 / 232 registers
# (-DFLASHSDPA_SM90_FWD_BIAS64_M=128: 0 spills, ptxas 13.0), against the default 192 rows, three
# consumers at 160 (62 bytes of spill stores in the consumers' main loop: the gpu_check SASS gate's
# last LDL/STL). Two narrow builds (bf16 d64, both families); the variant's mask GPU tests and a
# memcheck of one biased d64 forward; then 6 rounds alternating one process per build of
# scripts/dev/bias_fwd_time.py --head-dim 64. Prediction (kernel_notes_fwd_sm90.md, session 16):
# forward within -3% .. +3% (the spills' cost against the 192-row tile's reuse of each K / V load
# by a third warpgroup); keep 128 if it is not slower, for the gate. Short table last.
#   run(command="bash scripts/dev/bias64_ab.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy base "64" CUDAFLAGS=
build_copy m128 "64" CUDAFLAGS=-DFLASHSDPA_SM90_FWD_BIAS64_M=128
grep -B1 "bytes spill stores" "$OUT/build_m128.log" | grep -E "ModsKindE2" | head -3
SITE="${PYTHONPATH:-}"
export PYTHONPATH="/tmp/pkg_m128/python:$PWD/tests:$SITE"
tests "mask tests (m128)" 240 tests.log $PY -m pytest -q -p no:cacheprovider -n 10 tests/gpu/test_masks_gpu.py
cat > /tmp/bias64_one.py <<'PYEOF'
import torch, torch.nn.functional as F, flashsdpa
q, k, v = (torch.randn(2, 4, 700, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
bias = torch.randn(1, 4, 700, 700, device="cuda", dtype=torch.bfloat16)
with flashsdpa.enable():
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
torch.cuda.synchronize(); print("ok", float(out.float().abs().sum()))
PYEOF
timed "memcheck bias d64 (m128)" 90 memcheck.log compute-sanitizer --tool memcheck --kernel-name kns=flashsdpa \
  --error-exitcode 1 $PY /tmp/bias64_one.py
export PYTHONPATH="$SITE"
for round in 0 1 2 3 4 5; do
  for name in base m128; do
    PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timeout 60 $PY scripts/dev/bias_fwd_time.py --head-dim 64 --seed $round \
      | sed "s/^/$name /" >> "$OUT/ab.log"
  done
done
step "A/B rounds" "$(grep -c bias "$OUT/ab.log") lines"
$PY - "$OUT/ab.log" <<'PYEOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, _, _, _, fwd, _, bwd = line.split()
    rows.setdefault(name, []).append((float(fwd), float(bwd)))
for name, got in rows.items():
    print(f"{name:6s} fwd {statistics.median(f for f, _ in got):6.1f}  bwd {statistics.median(b for _, b in got):6.1f} TFLOP/s ({len(got)} rounds)")
if len(rows) == 2:
    a, b = rows["base"], rows["m128"]
    print("m128 / base fwd", round(statistics.median(y[0] / x[0] for x, y in zip(a, b)), 4),
          "bwd", round(statistics.median(y[1] / x[1] for x, y in zip(a, b)), 4))
PYEOF
finish
