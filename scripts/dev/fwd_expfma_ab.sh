#!/usr/bin/env bash
# fwd_expfma_ab.sh (session 18, prepared without device time; for the next session): the sm90
# forward with part of each row's exponentials on the FMA pipe (softmax.cuh's kFmaOf8, ptx.cuh's
# exp2_fma_zero) against today's MUFU-only kernel. Builds (bf16 d128, the issue-12 bars' head dim):
# base (=0), e1 (-DFLASHSDPA_SM90_FWD_EXP_FMA=1: 1 of 8 scores), e2 (2 of 8), e4 (4 of 8). The e2
# and e4 builds' forward tests (test_kernels.py, the extremes' NaN / inf patterns, huge logits,
# masks), memcheck of e2; then 3 rounds alternating one process per build of
# `bwd_ab.py --forward` (S 2k / 8k, causal or not, the Llama GQA shapes). Prediction in
# kernel_notes_fwd_sm90.md ("Exponentials on the FMA pipe"). Table last.
#   run(command="bash scripts/dev/fwd_expfma_ab.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy base "128" CUDAFLAGS=
for n in 1 2 4; do build_copy e$n "128" CUDAFLAGS=-DFLASHSDPA_SM90_FWD_EXP_FMA=$n; done
SITE="${PYTHONPATH:-}"
for name in e2 e4; do
  PYTHONPATH="/tmp/pkg_$name/python:$PWD/tests:$SITE" tests "tests $name" 150 tests_$name.log $PY -m pytest -q \
    -p no:cacheprovider -n 12 tests/gpu/test_kernels.py tests/gpu/test_extreme.py tests/gpu/test_masks_gpu.py
done
cat > /tmp/fwd_small.py <<'PYEOF'
import torch, flashsdpa
for causal in (False, True):
    q = torch.randn(2, 8, 1000, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(2, 2, 777, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = flashsdpa.attention(q, k, v, causal=causal)
torch.cuda.synchronize(); print("ok", float(out.float().abs().sum()))
PYEOF
PYTHONPATH="/tmp/pkg_e2/python:$SITE" timed "memcheck e2" 60 memcheck_e2.log \
  compute-sanitizer --tool memcheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY /tmp/fwd_small.py
for round in 0 1 2; do
  for name in base e1 e2 e4; do
    (( SECONDS > 540 )) && break 2
    PYTHONPATH="/tmp/pkg_$name/python:$SITE" timeout 60 $PY scripts/dev/bwd_ab.py --forward --rounds 1 --json \
      --dims 128 --seqlens 2048 8192 >> "$OUT/ab_$name.jsonl" 2>> "$OUT/ab_$name.err"
    check "A/B $name round $round" $?
  done
done
echo "A/B ended at $SECONDS s"
$PY scripts/dev/ab_table.py "$OUT" base e1 e2 e4
# Softcap's forward (tanh and exp2 both on MUFU: issue 14's 90%-of-plain bar), one process a
# build while the call has time: the fewer MUFU ops per score the larger the share should be.
for name in base e2 e4; do
  (( SECONDS > 560 )) && break
  echo "== $name" >> "$OUT/features.log"
  PYTHONPATH="/tmp/pkg_$name/python:$SITE" timeout 40 $PY scripts/dev/features_timing.py --reps 10 >> "$OUT/features.log" 2>&1
done
grep -E "^==|softcap|plain" "$OUT/features.log" | head -30
finish
