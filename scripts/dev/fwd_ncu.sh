#!/usr/bin/env bash
# fwd_ncu.sh: Nsight Compute's full section set on our sm90 forward kernel and cuDNN's, one shape
# of the standard sweep (scripts/dev/fwd_profile.py; default D 128, S 8k, causal: issue 12's 650
# bar, 612-644 in session 17), clocks left alone. Each kernel's details page, its source page
# (SASS with warp-stall samples per instruction, gzipped) and scripts/dev/ncu_source_top.py's
# summary of it (appended to the details), then the side-by-side lines. Builds a narrow package
# first (bf16, the head dim) unless ARG1=nobuild. (Session 17 made it self-contained; session 8
# wrote it for a package build made elsewhere.)
#   run(command="D=128 S=8192 CAUSAL=1 bash scripts/dev/fwd_ncu.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
D=${D:-128} S=${S:-8192} CAUSAL=${CAUSAL:-1}
if [[ "${1:-}" != nobuild ]]; then build_copy fncu "$D" CUDAFLAGS=; fi
export PYTHONPATH="/tmp/pkg_fncu/python${PYTHONPATH:+:$PYTHONPATH}"
ncu_kernel fwd_flashsdpa flashsdpa_fwd_sm90_kernel 200 $PY scripts/dev/fwd_profile.py "$D" "$S" "$CAUSAL"
ncu_kernel fwd_cudnn sdpa_sm90_flash_fprop 200 $PY scripts/dev/fwd_profile.py "$D" "$S" "$CAUSAL"
ncu_compare fwd_flashsdpa fwd_cudnn
finish
