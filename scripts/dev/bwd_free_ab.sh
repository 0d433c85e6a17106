#!/usr/bin/env bash
# bwd_free_ab.sh (session 18): the dQ writer frees each staging buffer once the TMA unit has read
# it, before the flags' releases (build f, the tree) against the tree with .ab_base/ laid over it
# (base: the free after them). racecheck (deterministic) and memcheck of f, 3 rounds alternating
# one process per build of bwd_ab.py (d128 S 2k / 8k causal or not, the Llama train shapes, then
# d64 8k). Table last. (Session 18's first A/B, bwd_writer_ab.sh, also moved the flag's acquire
# before the tile: -5-6% on GQA.)
#   run(command="bash scripts/dev/bwd_free_ab.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
rm -rf /tmp/basetree && cp -r "$PWD" /tmp/basetree && cp -r .ab_base/. /tmp/basetree/
(cd /tmp/basetree && build_copy base "64;128" CUDAFLAGS=)
build_copy f "64;128" CUDAFLAGS=
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
PYTHONPATH="/tmp/pkg_f/python:$SITE" timed "racecheck det f" 100 racecheck_f.log \
  compute-sanitizer --tool racecheck --kernel-name kns=flashsdpa_bwd_sm90 --error-exitcode 1 $PY /tmp/bwd_small.py det
PYTHONPATH="/tmp/pkg_f/python:$SITE" timed "memcheck f" 60 memcheck_f.log \
  compute-sanitizer --tool memcheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY /tmp/bwd_small.py def
for round in 0 1 2; do
  for name in base f; do
    (( SECONDS > 520 )) && break 2
    PYTHONPATH="/tmp/pkg_$name/python:$SITE" timeout 60 $PY scripts/dev/bwd_ab.py --rounds 1 --json --dims 128 \
      --seqlens 2048 8192 >> "$OUT/ab_$name.jsonl" 2>> "$OUT/ab_$name.err"
    check "A/B $name round $round" $?
    PYTHONPATH="/tmp/pkg_$name/python:$SITE" timeout 40 $PY scripts/dev/bwd_ab.py --rounds 1 --json --dims 64 \
      --seqlens 8192 >> "$OUT/ab_$name.jsonl" 2>> "$OUT/ab_$name.err"
    check "A/B d64 $name round $round" $?
  done
done
echo "A/B ended at $SECONDS s"
$PY scripts/dev/ab_table.py "$OUT" base f
finish
