#!/usr/bin/env bash
# Builds the standalone forward check (scripts/dev/fwd_check.cu) with the Hopper family in it:
# every case the sm90 family takes runs there; `./fwd_check_sm90 bench_sm90` times it.
#   bash scripts/dev/build_fwd_check_sm90.sh [out_binary]
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-/tmp/fwd_check_sm90}"
defs="-DFWD_CHECK_SM90 -DFLASHSDPA_HDIM_64 -DFLASHSDPA_HDIM_128 -DFLASHSDPA_HDIM_256 -DFLASHSDPA_DTYPE_FP16 -DFLASHSDPA_DTYPE_BF16"
nvcc -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr -lineinfo -gencode arch=compute_90a,code=sm_90a $defs \
  -I backend/include -I cuda scripts/dev/fwd_check.cu cuda/sm90/tiles_sm90.cu cuda/instantiations/dispatch_sm90.cu \
  cuda/instantiations/fwd_sm90_*.cu cuda/instantiations/bwd_sm90_*.cu -o "$out"
echo "built $out"
