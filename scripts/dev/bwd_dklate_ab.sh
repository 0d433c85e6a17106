#!/usr/bin/env bash
# bwd_dklate_ab.sh (session 18, prepared without device time; for the next session): the d128
# backward with dK's GEMM issued after dQ's, from the dS^T tile in shared memory (SS), retiring in
# the next step (-DFLASHSDPA_SM90_BWD_DK_LATE=1: BwdTraitsSm90::kDkLate) against today's kernel.
# Builds bf16 d128 (d64's plain kernel and the mods / dropout kernels are unchanged by the switch);
# the variant's backward tests, racecheck (deterministic: the ordered path) and memcheck; 3 rounds
# alternating one process per build of bwd_ab.py (d128 S 2k / 8k, causal or not, the Llama GQA
# shapes). Prediction: kernel_notes_bwd_sm90.md ("Late dK"). Table last.
#   run(command="bash scripts/dev/bwd_dklate_ab.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy base "128" CUDAFLAGS=
build_copy late "128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_DK_LATE=1
SITE="${PYTHONPATH:-}"
PYTHONPATH="/tmp/pkg_late/python:$PWD/tests:$SITE" tests "tests late" 200 tests_late.log $PY -m pytest -q -p no:cacheprovider \
  -n 12 tests/gpu/test_kernels.py tests/gpu/test_one_hot_grads.py tests/gpu/test_extreme.py tests/gpu/test_training.py
PYTHONPATH="/tmp/pkg_late/python:$SITE" timed "racecheck det late" 100 racecheck_late.log \
  compute-sanitizer --tool racecheck --kernel-name kns=flashsdpa_bwd_sm90 --error-exitcode 1 $PY scripts/dev/bwd_small.py det --dims 128
PYTHONPATH="/tmp/pkg_late/python:$SITE" timed "synccheck late" 60 synccheck_late.log \
  compute-sanitizer --tool synccheck --kernel-name kns=flashsdpa_bwd_sm90 --error-exitcode 1 $PY scripts/dev/bwd_small.py def --dims 128
PYTHONPATH="/tmp/pkg_late/python:$SITE" timed "memcheck late" 60 memcheck_late.log \
  compute-sanitizer --tool memcheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY scripts/dev/bwd_small.py def --dims 128
for round in 0 1 2; do
  for name in base late; do
    (( SECONDS > 540 )) && break 2
    PYTHONPATH="/tmp/pkg_$name/python:$SITE" timeout 60 $PY scripts/dev/bwd_ab.py --rounds 1 --json --dims 128 \
      --seqlens 2048 8192 >> "$OUT/ab_$name.jsonl" 2>> "$OUT/ab_$name.err"
    check "A/B $name round $round" $?
  done
done
echo "A/B ended at $SECONDS s"
$PY scripts/dev/ab_table.py "$OUT" base late
# Issue 9's small fp32 row while the call has time (its attention falls back: any build serves).
if (( SECONDS < 540 )); then
  PYTHONPATH="/tmp/pkg_base/python:$SITE" timed "small fp32 profile" $(( 585 - SECONDS )) small_fp32.log \
    $PY scripts/dev/small_fp32_profile.py
  head -45 "$OUT/small_fp32.log"
fi
finish
