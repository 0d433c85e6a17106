#!/usr/bin/env bash
# split_tail_gpu.sh: one device call for the sm90 forward's split tail (session 13): narrow build
# (bf16 + fp16, d64 / d128 / d256, both families), the split tail's GPU tests and the forward
# tests around it, compute-sanitizer memcheck and racecheck on one split launch, the SASS facts of
# the d128 kernels, then the A/B timing (scripts/dev/split_tail_ab.py). Short table last; exits 1
# if a step failed.
#   run(command="bash scripts/dev/split_tail_gpu.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 150 "64;128;256"
tests "split tail + fwd tests" 200 tests.log $PY -m pytest -q -p no:cacheprovider -n 8 tests/gpu/test_split_tail.py \
  tests/gpu/test_fwd_schedule.py tests/gpu/test_kernels.py tests/gpu/test_cxx_routers.py tests/gpu/test_sdpa.py
cat > /tmp/split_one.py <<'PYEOF'
import torch, flashsdpa
q, k, v = (torch.randn(2, 9, 1000, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
out = flashsdpa.attention(q, k, v); torch.cuda.synchronize(); print("ok", float(out.float().abs().sum()))
PYEOF
SAN=compute-sanitizer
timed "memcheck split" 90 memcheck.log $SAN --tool memcheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY /tmp/split_one.py
timed "racecheck split" 120 racecheck.log $SAN --tool racecheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY /tmp/split_one.py
obj=$(find /tmp/narrow_build -name "fwd_sm90_bf16_hdim128.cu.o" | head -1)
if [[ -n "$obj" ]]; then
  cuobjdump -sass "$obj" > "$OUT/fwd128.sass" 2>/dev/null
  step "sass d128" "HGMMA $(grep -c HGMMA "$OUT/fwd128.sass") UTMALDG $(grep -c UTMALDG "$OUT/fwd128.sass") LDL/STL $(grep -cE 'LDL|STL' "$OUT/fwd128.sass")"
fi
timed "A/B split tail" 200 ab.log $PY scripts/dev/split_tail_ab.py --rounds 3
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -10
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error" "$OUT"/memcheck.log "$OUT"/racecheck.log | head -6
tail -12 "$OUT/ab.log"
finish
