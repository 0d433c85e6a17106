#!/usr/bin/env bash
# session49_first.sh (prepared in session 48, compiled only), one call, ~5 minutes: session 48's
# backward wave groups in the tree's own build (its SASS equals the A/B's N = 8 build, which ran;
# the tree's build did not) and whether deterministic mode should take them too.
# 1. The tree (bf16 d64 / d128): the backward, deterministic and schedule tests; memcheck of
#    test_kernels' sanitizer subset; one round of bwd_ab.py, causal S 512 / 1k (expected d128
#    ~1.0x / ~0.97x cuDNN, from 0.83 / 0.84).
# 2. -DFLASHSDPA_SM90_BWD_DET_WAVES=1 (deterministic mode with the wave groups at <= 8 key blocks;
#    default 0, SASS byte-identical; 0 spills): its deterministic tests (bitwise, head groups), then
#    3 alternating process rounds of `bench --deterministic` (now with causal 1k cases), det ms of
#    the variant / the tree, and each build's det / default.
# Prediction: the tree's D128 1k causal det / default ~1.2-1.35x (the default mode is 15% faster
# there since session 48, deterministic mode kept the L2 group); with DET_WAVES the first wave holds
# all 8 key blocks of ~17 heads, whose turns chain (up to 7 hand-overs, ~16k cycles, against two
# staging buffers' ~10k of slack) but whose Q / dO reads spread: det time at 1k causal -5 to -12%
# (d128), within +-2% at 2k / 8k (16+ key blocks: not affected).
#   run(command="bash scripts/dev/session49_first.sh", carry=[".whl"], timeout_s=420)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16" build_copy det0 "64;128"
BUILD_DTYPES="bf16" build_copy det1 "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_DET_WAVES=1
require_copies det0 det1
T="/tmp/pkg_det0/python${SITE:+:$SITE}"
PYTHONPATH="$T" tests "tree: bwd + det + schedule tests" 70 tests_det0.log $PY -m pytest tests/gpu/test_kernels.py \
  tests/gpu/test_fwd_schedule.py tests/gpu/test_training.py -q -p no:cacheprovider -n 8 -k "bwd or determin or schedule or dynamic"
PYTHONPATH="$T" sanitize_subset memcheck 30 tests/gpu/test_kernels.py
PYTHONPATH="$T" timed "tree: bwd_ab causal" 40 ab.log $PY scripts/dev/bwd_ab.py --rounds 1 --dims 128 64 --causal yes \
  --seqlens 512 1024
tail -10 "$OUT/ab.log"
PYTHONPATH="/tmp/pkg_det1/python${SITE:+:$SITE}" tests "det1: deterministic tests" 60 tests_det1.log \
  $PY -m pytest tests/gpu/test_kernels.py tests/gpu/test_training.py -q -p no:cacheprovider -n 8 -k "determin"
((${#failed[@]})) && finish
det_ab 3 det0 det1
finish
