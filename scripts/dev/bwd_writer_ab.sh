#!/usr/bin/env bash
# bwd_writer_ab.sh (session 18): the backward's dQ hand-over after the session-18 stall attribution
# (kernel_notes_bwd_sm90.md, "Where the consumers stall"). Builds (bf16, d64 + d128):
#   base  the tree with .ab_base/ laid over it (the files before the change; delete .ab_base after),
#   w     the writer frees each staging buffer once it is read, flag acquire before the tile,
#   w1    w + the consumers publish the staged tile after the dP^T issue (-DFLASHSDPA_SM90_BWD_DQ_PUBLISH=1),
#   w2    w + one fence a step: published with dS^T's fence (=2).
# racecheck (deterministic, the ordered path) and memcheck of w2 and w1, the sm90 backward tests on
# w2, then 3 rounds alternating one process per build of bwd_ab.py (d128 and d64, S 2k / 8k,
# causal or not, the Llama train shapes). Table last.
#   run(command="bash scripts/dev/bwd_writer_ab.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
ROOT=$PWD
rm -rf /tmp/basetree && cp -r "$ROOT" /tmp/basetree && cp -r .ab_base/. /tmp/basetree/ && rm -rf /tmp/basetree/build
(cd /tmp/basetree && build_copy base "64;128" CUDAFLAGS=)
build_copy w "64;128" CUDAFLAGS=
build_copy w1 "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_DQ_PUBLISH=1
build_copy w2 "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_DQ_PUBLISH=2
SITE="${PYTHONPATH:-}"
cat > /tmp/bwd_small.py <<'PYEOF'
import sys, torch, flashsdpa
torch.use_deterministic_algorithms(sys.argv[1] == "det")
for d in (64, 128):
    q = torch.randn(1, 8, 700, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(1, 2, 500, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    out = flashsdpa.attention(q, k, v, causal=True)
    g = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    q, k, v = (torch.randn(2, 4, 1000, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    out = flashsdpa.attention(q, k, v)
    g = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
torch.cuda.synchronize(); print("ok", [float(t.float().abs().sum()) for t in g])
PYEOF
for name in w2 w1; do
  PYTHONPATH="/tmp/pkg_$name/python:$SITE" timed "racecheck det $name" 100 racecheck_$name.log \
    compute-sanitizer --tool racecheck --kernel-name kns=flashsdpa_bwd_sm90 --error-exitcode 1 $PY /tmp/bwd_small.py det
  PYTHONPATH="/tmp/pkg_$name/python:$SITE" timed "memcheck $name" 60 memcheck_$name.log \
    compute-sanitizer --tool memcheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY /tmp/bwd_small.py def
done
PYTHONPATH="/tmp/pkg_w2/python:$PWD/tests:$SITE" tests "tests w2" 150 tests_w2.log $PY -m pytest -q -p no:cacheprovider -n 12 \
  tests/gpu/test_kernels.py tests/gpu/test_one_hot_grads.py
# d128 for all four (the publish variants change the d128 kernels and the non-overlapped d64 ones,
# the writer every kernel), then d64 8k for base / w; rounds stop at ~540 s of the call's 600.
for round in 0 1 2; do
  for name in base w w1 w2; do
    (( SECONDS > 500 )) && break 2
    PYTHONPATH="/tmp/pkg_$name/python:$SITE" timeout 60 $PY scripts/dev/bwd_ab.py --rounds 1 --json --dims 128 \
      --seqlens 2048 8192 >> "$OUT/ab_$name.jsonl" 2>> "$OUT/ab_$name.err"
    check "A/B $name round $round" $?
  done
  for name in base w; do
    (( SECONDS > 530 )) && break 2
    PYTHONPATH="/tmp/pkg_$name/python:$SITE" timeout 40 $PY scripts/dev/bwd_ab.py --rounds 1 --json --dims 64 \
      --seqlens 8192 >> "$OUT/ab_$name.jsonl" 2>> "$OUT/ab_$name.err"
    check "A/B d64 $name round $round" $?
  done
done
echo "A/B ended at $SECONDS s"
$PY scripts/dev/ab_table.py "$OUT" base w w1 w2
finish
