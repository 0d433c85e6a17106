#!/usr/bin/env bash
# Builds the standalone check of the Hopper backward in development (scripts/dev/bwd_check_sm90.cu):
# it compares the sm90 backward with the portable one on the same inputs and times both.
#   bash scripts/dev/build_bwd_check_sm90.sh [out_binary] ["extra nvcc flags"] && /tmp/bwd_check_sm90 [check|bench|all|det|mods] [64|128]
# e.g. the d64 backward with K / V through shared memory (main's): "-DFLASHSDPA_SM90_BWD_KV_REGS=0".
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-/tmp/bwd_check_sm90}"
nvcc -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr -lineinfo -gencode arch=compute_90a,code=sm_90a \
  -I backend/include -I cuda ${2:-} scripts/dev/bwd_check_sm90.cu -o "$out"
echo "built $out"
