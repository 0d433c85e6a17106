#!/usr/bin/env bash
# (Ran in session 17, call 3, on 408955f; the old-stores macro went in 45e9c9f, so this script no
# longer builds the old kernel: check out 408955f to repeat it. Outcome: kernel_notes_bwd_sm90.md.)
# bwd_smem_ab.sh (session 17): the sm90 backward's shared-memory stores after ncu's comparison with
# cuDNN's (kernel_notes_bwd_sm90.md, "ncu against cuDNN"): dQ staged with 16-byte stores (was
# 8-byte, 2-way conflicted) and dS^T with stmatrix (was 32-bit stores), against the old stores
# (-DFLASHSDPA_SM90_BWD_NARROW_STORES=1, SASS byte-identical to session 16's kernel). Two narrow
# builds (bf16, d64 / d128); the new build's backward tests (kernels, one-hot rows, dropout, masks,
# extremes, features: every sm90 backward instantiation), racecheck / synccheck / memcheck on a
# small default and deterministic backward; ncu's store counters of both; then 3 rounds
# alternating one process per build of scripts/dev/bwd_ab.py --json (d128 / d64, S 2k / 8k, causal
# or not, GQA). Prediction in the notes. Short table last; exits 1 if a step failed.
#   run(command="bash scripts/dev/bwd_smem_ab.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy new "64;128" CUDAFLAGS=
build_copy old "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_NARROW_STORES=1
SITE="${PYTHONPATH:-}"  # the carried test wheels (device_env.sh)
export PYTHONPATH="/tmp/pkg_new/python:$PWD/tests:$SITE"
tests "tests new" 240 tests_new.log $PY -m pytest -q -p no:cacheprovider -n 12 -x \
  tests/gpu/test_kernels.py tests/gpu/test_one_hot_grads.py tests/gpu/test_dropout_gpu.py \
  tests/gpu/test_masks_gpu.py tests/gpu/test_extreme.py tests/gpu/test_features_gpu.py tests/gpu/test_training.py
timed "racecheck new" 150 racecheck.log \
  compute-sanitizer --tool racecheck --kernel-name kns=flashsdpa_bwd_sm90 --error-exitcode 1 $PY scripts/dev/bwd_small.py det
timed "synccheck new" 90 synccheck.log \
  compute-sanitizer --tool synccheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY scripts/dev/bwd_small.py def
timed "memcheck new" 90 memcheck.log \
  compute-sanitizer --tool memcheck --kernel-name kns=flashsdpa --error-exitcode 1 $PY scripts/dev/bwd_small.py def
METRICS=gpu__time_duration.sum,smsp__sass_inst_executed_op_shared_st.sum,smsp__inst_executed_op_shared_stsm.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio
for name in new old; do
  PYTHONPATH="/tmp/pkg_$name/python:$SITE" timed "ncu $name" 120 ncu_$name.log ncu --profile-from-start off \
    --clock-control none --metrics $METRICS --kernel-name regex:flashsdpa_bwd_sm90_kernel --launch-count 1 \
    $PY scripts/dev/bwd_ncu.py --backend flashsdpa
  grep -E "gpu__time|shared_st|stsm|conflicts|hmma|mio" "$OUT/ncu_$name.log"
done
for round in 0 1 2; do
  for name in new old; do
    PYTHONPATH="/tmp/pkg_$name/python:$SITE" timeout 120 $PY scripts/dev/bwd_ab.py --rounds 1 --json \
      --seqlens 2048 8192 >> "$OUT/ab_$name.jsonl" 2>> "$OUT/ab_$name.err"
    check "A/B $name round $round" $?
  done
done
$PY scripts/dev/ab_table.py "$OUT" old new
finish
