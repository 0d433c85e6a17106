#!/usr/bin/env bash
# session48_bwd_wave_group.sh (session 48), one call, ~4-5 minutes: the forward's wave sections
# (sched_group, +10-14% at d128 causal S 256-512) carried to the backward's launch order: masked
# calls with few key blocks a head launch in groups of a wave's worth of heads
# (-DFLASHSDPA_SM90_BWD_WAVE_GROUP=N: at most N key blocks; BwdGridOrder) instead of the 32 MB L2
# group, whose first wave starts the longest key block of 128 heads at once (d128 S 512), each
# streaming its head's Q / dO from DRAM. Builds: tree, N = 4, N = 8 (bf16 d64 / d128 / d256); the
# causal backward tests on N = 8, then 3 alternating process rounds of bwd_ab.py (backward), causal.
# Prediction: d128 causal S 512 +2-6% (the backward is less DRAM-bound than the forward: ~600 us
# of tensor work against ~330 us of DRAM at S 512), 1k (8 blocks, N = 8 only) 0-3%; d64 alike;
# GQA 16/4 controls 1.00.
# (The define was the dev form; the tree's BwdGridOrder now takes wave groups for the plain
# kernels at <= 8 key blocks, the grouped ones keep the L2 group: this script's g8 build is the tree's
# plain kernels byte for byte, sass_hashes.py.)
#   run(command="bash scripts/dev/session48_bwd_wave_group.sh", carry=[".whl"], timeout_s=330)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16" build_copy g0 "64;128;256"
BUILD_DTYPES="bf16" build_copy g4 "64;128;256" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_WAVE_GROUP=4
BUILD_DTYPES="bf16" build_copy g8 "64;128;256" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_WAVE_GROUP=8
require_copies g0 g4 g8
PYTHONPATH="/tmp/pkg_g8/python${SITE:+:$SITE}" tests "causal bwd tests (g8)" 90 tests_g8.log \
  $PY -m pytest tests/gpu/test_kernels.py -q -p no:cacheprovider -n 8 -k "bwd and causal"
((${#failed[@]})) && finish
AB_STOP=${AB_STOP:-300} bwd_ab_rounds 3 "g0 g4 g8" --dims 128 64 256 --causal yes --seqlens 512 1024
finish
