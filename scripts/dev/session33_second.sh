#!/usr/bin/env bash
# session33_second.sh (prepared in session 33, not yet run: no H200 came): Nsight Compute on the forward's short-sequence cells that stay below cuDNN
# (issue 12's "every cell from S 512 >= 1.0x cuDNN"): d128 S 512 non-causal (B 32 x H 16: 0.93x
# in session 32's sweep) and d64 S 512 causal (B 32 x H 32: 151.3 against 128.8 us, 0.85x, session
# 27). kernel_notes_fwd_sm90.md's "Next" has asked for this profile since call 7 (per-tile
# overheads at 4 key blocks a tile); each kernel's details and stall-sample summary land in $OUT
# (fwd_ncu.sh's ncu_kernel), the side-by-side lines last. Ours may be the portable family's kernel
# at d64 (the speed rule), so the regex takes either family.
#   run(command="bash scripts/dev/session33_second.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy fncu "64;128" CUDAFLAGS=
export PYTHONPATH="/tmp/pkg_fncu/python${PYTHONPATH:+:$PYTHONPATH}"
ncu_kernel ours_d128_s512 "flashsdpa_fwd" 120 $PY scripts/dev/fwd_profile.py 128 512 0 > /dev/null
ncu_kernel cudnn_d128_s512 "sdpa_sm90_flash_fprop|cudnn" 120 $PY scripts/dev/fwd_profile.py 128 512 0 > /dev/null
ncu_kernel ours_d64_s512c "flashsdpa_fwd" 120 $PY scripts/dev/fwd_profile.py 64 512 1 > /dev/null
ncu_kernel cudnn_d64_s512c "sdpa_sm90_flash_fprop|cudnn" 120 $PY scripts/dev/fwd_profile.py 64 512 1 > /dev/null
ncu_compare ours_d128_s512 cudnn_d128_s512 ours_d64_s512c cudnn_d64_s512c
finish
