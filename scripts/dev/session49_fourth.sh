#!/usr/bin/env bash
# session49_fourth.sh (session 49), one call, ~6 minutes: the backward's final launch order in its
# own build (wave groups up to 16 key blocks, deterministic mode taking them too: both measured in
# session49_first / second on separate builds), then the bound at 32 / 64 key blocks.
# 1. The tree (bf16 + fp16, d64 / d128): the backward, deterministic, schedule and training tests;
#    memcheck and racecheck of test_kernels' sanitizer subset; `bench --deterministic` (3 rounds in
#    one process): d128 2k causal now takes the wave groups in deterministic mode too.
# 2. -DFLASHSDPA_SM90_BWD_WAVE_GROUP_BLOCKS=32 / 64 (bf16 d128) against the tree: 3 alternating
#    process rounds of bwd_ab.py, causal, 4k / 8k / 16k (B 4 / 2 / 1, H 16; GQA 16/4 controls).
# Prediction: the tree's det / default at D128 2k causal 1.10-1.16 (session 49's DET_WAVES A/B
# gave 1k -11%; with 16 key blocks a wave holds 8 heads, whose chains are twice as long); wb32 at
# 4k causal +0-4% (the 2k gain was +4.8%, but 4k's CTAs are twice as long against the same first
# wave), 8k / 16k (wb64 only) within +-2%.
#   run(command="bash scripts/dev/session49_fourth.sh", carry=[".whl"], timeout_s=480)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16;fp16" build_copy tree "64;128"
BUILD_DTYPES="bf16" build_copy wb32 "128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_WAVE_GROUP_BLOCKS=32
BUILD_DTYPES="bf16" build_copy wb64 "128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_WAVE_GROUP_BLOCKS=64
require_copies tree wb32 wb64
T="/tmp/pkg_tree/python${SITE:+:$SITE}"
PYTHONPATH="$T" tests "tree: bwd + det + schedule + training" 120 tests_tree.log $PY -m pytest tests/gpu/test_kernels.py \
  tests/gpu/test_fwd_schedule.py tests/gpu/test_training.py -q -p no:cacheprovider -n 8 -k "bwd or determin or schedule or dynamic or train"
PYTHONPATH="$T" sanitize_subset memcheck 40 tests/gpu/test_kernels.py
PYTHONPATH="$T" sanitize_subset racecheck 60 tests/gpu/test_kernels.py
PYTHONPATH="$T" timed "bench deterministic" 90 det.log $PY -m flashsdpa bench --deterministic --rounds 3 --out /tmp/b_det
tail -22 "$OUT/det.log"
((${#failed[@]})) && finish
AB_STOP=$((SECONDS + 200)) bwd_ab_rounds 3 "tree wb32 wb64" --dims 128 --causal yes --seqlens 4096 8192 16384
finish
