#!/usr/bin/env bash
# bwd_persistent_gpu.sh: one device call for the sm90 backward's persistent grid (prepared in
# session 14, which had no GPU): narrow build with FLASHSDPA_SM90_BWD_PERSISTENT=ON (bf16 + fp16,
# d64 / d128 / d256, both families), the persistent grid's GPU tests,
# compute-sanitizer memcheck / racecheck / synccheck on persistent backwards (the grid capped at 3
# CTAs: many items each; causal GQA, default and deterministic mode), the A/B against one CTA per
# item and cuDNN (scripts/dev/bwd_persistent_ab.py), then the whole GPU suite. Short table last;
# exits 1 if a step failed (issue 10's extreme tie case and the fuzz case are known failures).
#   run(command="bash scripts/dev/bwd_persistent_gpu.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
export FLASHSDPA_SM90_BWD_PERSISTENT=ON
narrow_build 150 "64;128;256"
grep -E "bwd_sm90" "$OUT/spills.txt" | cut -c1-160 | head -8
tests "persistent bwd tests" 120 tests.log $PY -m pytest -q -p no:cacheprovider -n 8 tests/gpu/test_bwd_persistent.py
cat > /tmp/bwd_one.py <<'PYEOF'
import sys, torch, flashsdpa
torch.use_deterministic_algorithms(sys.argv[1] == "det")
for d in (64, 128):
    q = torch.randn(2, 8, 700, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(2, 2, 1100, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    out = flashsdpa.attention(q, k, v, causal=True)
    g = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    torch.cuda.synchronize(); print("ok", d, [float(t.float().abs().sum()) for t in g])
PYEOF
SAN=compute-sanitizer
export FLASHSDPA_SM90_BWD_GRID=3
timed "memcheck persistent" 90 memcheck.log $SAN --tool memcheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY /tmp/bwd_one.py def
timed "racecheck persistent" 120 racecheck.log $SAN --tool racecheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY /tmp/bwd_one.py det
timed "synccheck persistent" 90 synccheck.log $SAN --tool synccheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY /tmp/bwd_one.py def
unset FLASHSDPA_SM90_BWD_GRID
timed "A/B persistent" 150 ab.log $PY scripts/dev/bwd_persistent_ab.py --rounds 3
tests "GPU suite" 200 suite.log $PY -m pytest -q -p no:cacheprovider -n 10 tests/gpu
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -10
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error" "$OUT"/memcheck.log "$OUT"/racecheck.log "$OUT"/synccheck.log | head -6
tail -16 "$OUT/ab.log"
finish
