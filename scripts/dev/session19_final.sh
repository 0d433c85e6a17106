#!/usr/bin/env bash
# session19_final.sh: the session's one validation call after its kernel changes (late dK the
# default, the dynamic causal order at every length at d128, the FMA exponentials removed). Every
# other TU's SASS is identical to the last suite-tested tree (checked here: fwd / decode / bwd sm80
# d128, fwd sm90 d64 / d256, bwd sm90 d64), so the build is the two changed TUs' dims: bf16 + fp16
# d128 (both families). gpu_check's suite, sanitizer subset and quick bench, then issue 9's
# per-call fallback probe (small_fp32_profile.py --calls) with the backward split by thread.
#   run(command="bash scripts/dev/session19_final.sh", carry=[".whl"], timeout_s=480)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/flashsdpa_out}"
FLASHSDPA_DTYPES="fp16;bf16" FLASHSDPA_HEAD_DIMS="128" BOTH_FAMILIES=0 SANITIZE=1 SANITIZE_TIMEOUT=35 \
  TESTS_TIMEOUT=150 BENCH="--quick" BENCH_TIMEOUT=90 CALL_BUDGET=400 bash scripts/gpu_check.sh
rc=$?
PYTHONPATH="$PWD/python:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" timeout 45 python3 scripts/dev/small_fp32_profile.py --calls --steps 2 > "$OUT/calls.log" 2>&1
sed -n '/^4\./,/^5\./p' "$OUT/calls.log"
exit $rc
