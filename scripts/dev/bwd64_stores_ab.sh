#!/usr/bin/env bash
# bwd64_stores_ab.sh (prepared in session 17 without device time; for the next session): which of
# session 17's two store changes the d64 backward loses on (it measured both together at 0.968-0.995
# of the old stores, while d128 gained 1.004-1.029): the 16-byte dQ staging stores alone
# (-DFLASHSDPA_SM90_BWD64_STORES=1), stmatrix for dS^T alone (=2), against today's d64 kernel (0).
# Three narrow builds (bf16 + fp16, d64 / d128); each variant's backward tests; racecheck of one; 3
# rounds alternating one process per build of bwd_ab.py --dims 64 (S 2k / 8k, causal or not).
# Prediction (kernel_notes_bwd_sm90.md): stmatrix alone >= 1.0 (a quarter of the dS^T store
# instructions, same registers); the 16-byte dQ stores the loser (the overlapped d64 step stages dQ
# under the next S^T / dP^T issue, where pairing two n8 blocks per store may lengthen the live
# range of dq_prev). Whichever is >= 1.005 in every cell becomes d64's default. Table last.
#   run(command="bash scripts/dev/bwd64_stores_ab.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export BUILD_DTYPES="bf16;fp16"
build_copy base "64;128" CUDAFLAGS=
build_copy dq "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD64_STORES=1
build_copy ds "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD64_STORES=2
for name in dq ds; do
  PYTHONPATH="/tmp/pkg_$name/python:$PWD/tests:$SITE" tests "tests $name" 200 tests_$name.log \
    $PY -m pytest -q -p no:cacheprovider -n 12 tests/gpu/test_kernels.py tests/gpu/test_one_hot_grads.py
done
for name in dq ds; do
  PYTHONPATH="/tmp/pkg_$name/python:$SITE" timed "racecheck $name" 90 racecheck_$name.log \
    compute-sanitizer --tool racecheck --kernel-name kns=flashsdpa_bwd_sm90 --error-exitcode 1 $PY scripts/dev/bwd_small.py det --dims 64
done
ab_rounds "base dq ds" 90 --dims 64 --seqlens 2048 8192
finish
