#!/usr/bin/env bash
# decode_ncu.sh (session 27, not yet run): Nsight Compute on the decode kernel's contiguous road and
# its paged road with 1024-key pages in order (the same addresses: 1.07x the time, issue 11's bar
# is 1.05) and with 64-key pages shuffled (1.11x), B 1 x 128k keys (scripts/dev/decode_ncu.py).
# Compare executed instructions, issue-slot use and the stall reasons of the copies' issue.
#   run(command="bash scripts/dev/decode_ncu.sh", carry=[".whl"], timeout_s=400)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy dncu "128"
export PYTHONPATH="/tmp/pkg_dncu/python${PYTHONPATH:+:$PYTHONPATH}"
ncu_kernel contiguous flashsdpa_decode_sm80_kernel 90 $PY scripts/dev/decode_ncu.py contiguous
ncu_kernel paged1024 flashsdpa_decode_sm80_kernel 90 $PY scripts/dev/decode_ncu.py paged --page 1024
ncu_kernel paged64s flashsdpa_decode_sm80_kernel 90 $PY scripts/dev/decode_ncu.py paged --page 64 --shuffled
ncu_compare contiguous paged1024 paged64s
finish
