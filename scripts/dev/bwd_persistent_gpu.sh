#!/usr/bin/env bash
# bwd_persistent_gpu.sh: one device call for the sm90 backward's persistent grid (prepared in
# session 14, which had no GPU): narrow build with FLASHSDPA_SM90_BWD_PERSISTENT=ON (bf16 + fp16,
# d64 / d128 / d256, both families), the persistent grid's GPU tests,
# compute-sanitizer memcheck / racecheck / synccheck on persistent backwards (the grid capped at 3
# CTAs: many items each; causal GQA, default and deterministic mode), the A/B against one CTA per
# item and cuDNN (scripts/dev/bwd_persistent_ab.py), then the whole GPU suite if the call's 600 s
# leave room for it (it starts only before 330 s; else it says so: run `PARTS=suite` next). Short
# table last; exits 1 if a step failed (issue 10's extreme tie case and the fuzz case are known
# failures). PARTS (default "tests sanitizers ab suite") picks the steps after the build.
#   run(command="bash scripts/dev/bwd_persistent_gpu.sh", carry=[".whl"], timeout_s=600)
#   run(command="PARTS=suite bash scripts/dev/bwd_persistent_gpu.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
START=$(date +%s)
PARTS="${PARTS:-tests sanitizers ab suite}"
want() { [[ " $PARTS " == *" $1 "* ]]; }
export PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
export FLASHSDPA_SM90_BWD_PERSISTENT=ON
narrow_build 150 "64;128;256"
grep -E "bwd_sm90" "$OUT/spills.txt" | cut -c1-160 | head -8
want tests && tests "persistent bwd tests" 120 tests.log $PY -m pytest -q -p no:cacheprovider -n 8 tests/gpu/test_bwd_persistent.py
cat > /tmp/bwd_one.py <<'PYEOF'
import sys, torch, flashsdpa
torch.use_deterministic_algorithms(sys.argv[1] == "det")
for d in ((64, 128) if sys.argv[2:] != ["128"] else (128,)):  # 18 items on 3 CTAs per head dim
    q = torch.randn(1, 8, 700, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(1, 2, 1100, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    out = flashsdpa.attention(q, k, v, causal=True)
    g = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    torch.cuda.synchronize(); print("ok", d, [float(t.float().abs().sum()) for t in g])
PYEOF
SAN=compute-sanitizer
export FLASHSDPA_SM90_BWD_GRID=3
if want sanitizers; then
  timed "memcheck persistent" 90 memcheck.log $SAN --tool memcheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY /tmp/bwd_one.py def
  timed "racecheck persistent" 100 racecheck.log $SAN --tool racecheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY /tmp/bwd_one.py det 128
  timed "synccheck persistent" 80 synccheck.log $SAN --tool synccheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY /tmp/bwd_one.py def 128
fi
unset FLASHSDPA_SM90_BWD_GRID
want ab && timed "A/B persistent" 150 ab.log $PY scripts/dev/bwd_persistent_ab.py --rounds 3
if want suite && (( $(date +%s) - START < 330 )); then
  tests "GPU suite" 240 suite.log $PY -m pytest -q -p no:cacheprovider -n 10 tests/gpu
elif want suite; then
  step "GPU suite" "not started at $(( $(date +%s) - START )) s: run PARTS=suite next"
  failed+=("GPU suite (not run)")
fi
[[ -f "$OUT/tests.log" ]] && grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -10
grep -sE "ERROR SUMMARY|RACECHECK SUMMARY|Error" "$OUT"/memcheck.log "$OUT"/racecheck.log "$OUT"/synccheck.log | head -6
[[ -f "$OUT/ab.log" ]] && tail -16 "$OUT/ab.log"
finish
