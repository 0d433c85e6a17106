#!/usr/bin/env bash
# session36_second.sh (prepared in session 35, run in session 36): where the head-dim-512 forward's time
# goes (issue 14's bar: 600 TFLOP/s at 8k on the H200; the H100 gave 487 in session 34), as session
# 35 did for the d512 backward (kernel_notes_bwd_sm90.md: its two exchange waits were 18.6% of the
# step's stall samples). ncu of fwd512 at 8k (bf16, H 4, B 2) beside the d256 forward's tile at the
# same per-CTA work (H 8, B 2), each kernel's stall samples by instruction and by times executed
# (ncu_source_top.py): the exchange's try-waits, the tensor pipe's share, the grid's 7.75 waves.
#   run(command="bash scripts/dev/session36_second.sh", carry=[".whl"], timeout_s=400)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy f512 "256;512" CUDAFLAGS=
export PYTHONPATH="/tmp/pkg_f512/python${SITE:+:$SITE}"
ncu_kernel fwd512_8k "flashsdpa_fwd512" 120 $PY scripts/dev/hdim512_time.py --rounds 1 --seqlens 8192 > /dev/null
ncu_kernel fwd256_8k "flashsdpa_fwd_sm90" 120 $PY scripts/dev/fwd_profile.py 256 8192 0 > /dev/null
ncu_compare fwd256_8k fwd512_8k
finish
