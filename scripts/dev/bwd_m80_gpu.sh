#!/usr/bin/env bash
# bwd_m80_gpu.sh (session 16): the 80-query step of the d128 sm90 backward
# (-DFLASHSDPA_SM90_BWD_M80=1; kernel_notes_bwd_sm90.md, "The 80-query step") on the H200, in one call:
#   1. an in-place narrow build (bf16 + fp16, d64 / d128) with the switch on, and the whole GPU suite
#      on it (the unmasked d128 backward rows then run the 80-query kernel; the rest as before);
#   2. the portable family forced on test_kernels.py (the same build);
#   3. memcheck, racecheck and synccheck on small unmasked d128 backwards (GQA, Sq != Sk, tails);
#   4. two fresh builds (bf16 d128: the default, and the switch on) and 3 rounds alternating one
#      process per build of scripts/dev/bwd_ab.py --dims 128 --causal no: m80 / base and base / cuDNN.
# Prediction (written before the run, kernel_notes_bwd_sm90.md): whole backward +3-7% at 2k and 8k
# (the main loop +6-10%, less the zeroed dq_accum and the postprocess after the grid), 1k +0-4%.
# Short table last; exits 1 if a step failed.
#   run(command="bash scripts/dev/bwd_m80_gpu.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
CUDAFLAGS=-DFLASHSDPA_SM90_BWD_M80=1 narrow_build 240 "64;128"
tests "gpu suite (m80)" 240 tests_m80.log $PY -m pytest -q -p no:cacheprovider -n 10 tests/gpu
tests "sm80 forced kernels" 120 tests_sm80.log env FLASHSDPA_FAMILY=sm80 $PY -m pytest -q -p no:cacheprovider -n 10 \
  tests/gpu/test_kernels.py
cat > /tmp/bwd_m80_small.py <<'PYEOF'
import torch, flashsdpa
for (b, hq, hkv, sq, sk, d, dt) in ((1, 8, 2, 130, 257, 128, torch.bfloat16), (2, 4, 4, 81, 200, 96, torch.float16),
                                    (1, 2, 1, 1, 129, 128, torch.bfloat16)):
    q = torch.randn(b, hq, sq, d, device="cuda", dtype=dt, requires_grad=True)
    k, v = (torch.randn(b, hkv, sk, d, device="cuda", dtype=dt, requires_grad=True) for _ in range(2))
    out = flashsdpa.attention(q, k, v)
    g = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    torch.cuda.synchronize(); print("ok", [float(t.float().abs().sum()) for t in g])
PYEOF
for tool in memcheck racecheck synccheck; do
  timed "$tool (m80)" 120 "$tool.log" compute-sanitizer --tool "$tool" --kernel-name kns=flashsdpa --error-exitcode 1 \
    $PY /tmp/bwd_m80_small.py
done
build_copy base "128" CUDAFLAGS=
build_copy m80 "128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_M80=1
for round in 0 1 2; do
  for name in base m80; do
    PYTHONPATH="/tmp/pkg_$name/python" timeout 100 $PY scripts/dev/bwd_ab.py --rounds 1 --json --dims 128 --causal no \
      >> "$OUT/ab_$name.jsonl" 2>> "$OUT/ab_$name.err"
    check "A/B $name round $round" $?
  done
done
$PY - "$OUT" <<'PYEOF'
import json, statistics, sys
def load(name):
    rows = {}
    for line in open(f"{sys.argv[1]}/ab_{name}.jsonl"):
        r = json.loads(line)
        rows.setdefault(r["problem"], []).append(r)
    return rows
base, m80 = load("base"), load("m80")
print(f"{'problem':32s} {'base':>7s} {'m80':>7s} {'m80/base':>9s} {'base/cuDNN':>10s} {'m80/cuDNN':>10s}")
for problem, rb in base.items():
    rv = m80.get(problem, [])
    k = min(len(rb), len(rv))
    ratio = statistics.median(rv[i]["base"] / rb[i]["base"] for i in range(k)) if k else float("nan")
    print(f"{problem:32s} {statistics.median(r['base'] for r in rb):7.1f} "
          f"{statistics.median(r['base'] for r in rv) if rv else float('nan'):7.1f} {ratio:9.3f} "
          f"{statistics.median(r['base'] / r['cudnn'] for r in rb):10.3f} "
          f"{statistics.median(r['base'] / r['cudnn'] for r in rv) if rv else float('nan'):10.3f}")
PYEOF
finish
