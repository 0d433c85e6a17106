#!/usr/bin/env bash
# dq_bufs_ab.sh (prepared in session 15 without device time; to run first in the next): the sm90
# backward with one dQ staging buffer (-DFLASHSDPA_SM90_BWD_DQ_BUFS=1, 32 KB freed at d128) and with
# that plus a third Q / dO stage (-DFLASHSDPA_SM90_BWD_STAGES=3), against the default (2 / 2), on
# the H200. Three narrow builds (bf16, d64 / d128, both families) via build_copy; the variants' GPU
# tests (test_kernels.py, test_one_hot_grads.py; the single buffer changes the dQ writer's
# protocol); racecheck and synccheck on a small deterministic / default backward of the 1-buffer
# 3-stage build; then 3 rounds alternating one process per build of scripts/dev/bwd_ab.py --json,
# the medians of variant / default and of each against its process's cuDNN. Prediction
# (kernel_notes_bwd_sm90.md): 1 buffer within +-1% of 2 (the writer's reduce reads a tile in well
# under a step); 3 stages +0-2% (the ring's slack for the Q / dO loads grows by a step). Short table
# last; exits 1 if a step failed.
#   run(command="bash scripts/dev/dq_bufs_ab.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy base "64;128" CUDAFLAGS=
build_copy dq1 "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_DQ_BUFS=1
build_copy dq1s3 "64;128" "CUDAFLAGS=-DFLASHSDPA_SM90_BWD_DQ_BUFS=1 -DFLASHSDPA_SM90_BWD_STAGES=3"
SITE="${PYTHONPATH:-}"  # the carried test wheels (device_env.sh)
for name in dq1 dq1s3; do
  export PYTHONPATH="/tmp/pkg_$name/python:$PWD/tests:$SITE"
  tests "tests $name" 200 tests_$name.log $PY -m pytest -q -p no:cacheprovider -n 10 \
    tests/gpu/test_kernels.py tests/gpu/test_one_hot_grads.py
done
cat > /tmp/bwd_small.py <<'PYEOF'
import sys, torch, flashsdpa
torch.use_deterministic_algorithms(sys.argv[1] == "det")
q = torch.randn(1, 8, 700, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
k, v = (torch.randn(1, 2, 500, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
out = flashsdpa.attention(q, k, v, causal=True)
g = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
torch.cuda.synchronize(); print("ok", [float(t.float().abs().sum()) for t in g])
PYEOF
export PYTHONPATH="/tmp/pkg_dq1s3/python:$SITE"
timed "racecheck dq1s3" 120 racecheck.log \
  compute-sanitizer --tool racecheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY /tmp/bwd_small.py det
timed "synccheck dq1s3" 90 synccheck.log \
  compute-sanitizer --tool synccheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY /tmp/bwd_small.py def
export PYTHONPATH="$SITE"
for round in 0 1 2; do
  for name in base dq1 dq1s3; do
    PYTHONPATH="/tmp/pkg_$name/python" timeout 100 $PY scripts/dev/bwd_ab.py --rounds 1 --json \
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
base, variants = load("base"), {n: load(n) for n in ("dq1", "dq1s3")}
print(f"{'problem':32s} {'base':>7s} {'dq1/base':>9s} {'dq1s3/base':>10s} {'base/cuDNN':>10s}")
for problem, rb in base.items():
    ratios = []
    for n, rows in variants.items():
        rv = rows.get(problem, [])
        k = min(len(rb), len(rv))
        ratios.append(statistics.median(rv[i]["base"] / rb[i]["base"] for i in range(k)) if k else float("nan"))
    print(f"{problem:32s} {statistics.median(r['base'] for r in rb):7.1f} {ratios[0]:9.3f} {ratios[1]:10.3f} "
          f"{statistics.median(r['base'] / r['cudnn'] for r in rb):10.3f}")
PYEOF
finish
