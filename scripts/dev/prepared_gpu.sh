#!/usr/bin/env bash
# (Ran in session 17, call 1; outcomes in the kernel notes. Its bias64 part no longer builds a
# variant since 5c866b1: check out be8e905 to repeat it.)
# prepared_gpu.sh (session 16, for the next session's first device call): what session 16 prepared
# without device time, in one call of ~5 minutes:
#   1. scripts/dev/bias64_ab.sh: the d64 bias forward at 128 rows (0 spills) against 192 (A/B,
#      mask tests, memcheck);
#   2. a narrow build (bf16, d64 / d128), then scripts/dev/bwd_launch_spy.py: the launch
#      configurations (grid, block, registers, shared memory, time) of cuDNN's, PyTorch flash's and
#      our backward kernels (kernel_notes_bwd_sm90.md, "Next for the backward");
#   3. scripts/dev/overhead_only.py on that build: the bench's re-defined overhead rows (equal
#      work, training step, backward; issue 9);
#   4. scripts/dev/decode_splits.py on that build: decode GPU time (replayed graphs) against the
#      number of KV splits, beside cuDNN and flash (issue 11's B 1 x 8k bar).
# Each part's table in its log under $OUT; exits 1 if a part failed.
#   run(command="bash scripts/dev/prepared_gpu.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
timed "bias64_ab.sh" 330 bias64_ab.log bash scripts/dev/bias64_ab.sh
tail -12 "$OUT/bias64_ab.log"
build_copy spy "64;128" CUDAFLAGS=
export PYTHONPATH="/tmp/pkg_spy/python${PYTHONPATH:+:$PYTHONPATH}"
timed "bwd_launch_spy.py" 150 spy.log $PY scripts/dev/bwd_launch_spy.py --json "$OUT/spy.json"
grep -E "bprop|bwd|dq|dk|flash|cudnn" "$OUT/spy.log" | head -40
timed "overhead_only.py" 90 overhead.log $PY scripts/dev/overhead_only.py
tail -12 "$OUT/overhead.log"
timed "decode_splits.py" 150 decode_splits.log $PY scripts/dev/decode_splits.py
cat "$OUT/decode_splits.log" | tail -45
finish
