#!/usr/bin/env bash
# session28_first.sh (prepared in session 27, not yet run; session 28 added the 512 bucket and
# tests/gpu/test_hdim512.py, which a full build now compiles and runs): the whole GPU suite on a full build of
# the tree as session 27 left it (issue 10: the last full-build run was session 25's; session 27
# ran d64 / d128 builds only), both families, the speed rules off, racecheck of the subset.
#   run(command="bash scripts/dev/session28_first.sh", carry=[".whl"], timeout_s=600)
# Then issue 12's d64 question, where cuDNN's forward gains at (B, H, S) = (64, 32, 256) causal
# (92.3 against our 113.8 us; neither the 128-row short tile nor a 64-row tile closed it:
# kernel_notes_fwd_sm90.md, session 27), Nsight Compute on both kernels:
#   run(command="D=64 S=256 CAUSAL=1 bash scripts/dev/fwd_ncu.sh", carry=[".whl"], timeout_s=400)
set -uo pipefail
cd "$(dirname "$0")/../.."
BOTH_FAMILIES=1 SANITIZE=1 SANITIZE_TOOLS="racecheck" RACECHECK_TIMEOUT=100 TESTS_TIMEOUT=200 BENCH=none \
  CALL_BUDGET=590 bash scripts/gpu_check.sh
