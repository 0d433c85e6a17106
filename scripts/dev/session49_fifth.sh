#!/usr/bin/env bash
# session49_fifth.sh (session 49), one call, ~5-6 minutes: the tree's final backward order in its own
# build (deterministic mode's wave groups bounded at 8 key blocks again, after session49_fourth.sh
# saw the d64 tall kernel's det / default at 2k causal go 1.18 -> 1.22 with 16), and the d256 plain
# kernel with wave groups (-DFLASHSDPA_SM90_BWD_WAVE_WIDE=2048 / 4096; default 0, SASS unchanged).
# 1. The tree (bf16 d64 / d128 / d256): backward, deterministic, schedule and training tests;
#    memcheck of test_kernels' sanitizer subset; `bench --deterministic` (3 rounds, one process).
# 2. ww2k / ww4k (bf16 d256): the causal backward tests and memcheck on ww2k; 3 alternating process
#    rounds of bwd_ab.py, d256 causal 2k / 4k / 8k (B 8 / 4 / 2 x H 8).
# Prediction: det / default D64 2k causal back to ~1.18, the rest as in session49_fourth.sh; d256
# causal 2k +2-6% with ww2k (32 key blocks of 64 keys; the 32 MB group's first wave is key blocks 0-7
# of 16 heads, 32 MB of Q / dO streamed at once, as d128's was), 4k with ww4k +0-3%, 8k unchanged.
#   run(command="bash scripts/dev/session49_fifth.sh", carry=[".whl"], timeout_s=420)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16" build_copy tree "64;128;256"
BUILD_DTYPES="bf16" build_copy ww2k "256" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_WAVE_WIDE=2048
BUILD_DTYPES="bf16" build_copy ww4k "256" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_WAVE_WIDE=4096
require_copies tree ww2k ww4k
T="/tmp/pkg_tree/python${SITE:+:$SITE}"
PYTHONPATH="$T" tests "tree: bwd + det + schedule + training" 120 tests_tree.log $PY -m pytest tests/gpu/test_kernels.py \
  tests/gpu/test_fwd_schedule.py tests/gpu/test_training.py -q -p no:cacheprovider -n 8 -k "bwd or determin or schedule or dynamic or train"
PYTHONPATH="$T" sanitize_subset memcheck 40 tests/gpu/test_kernels.py
PYTHONPATH="$T" timed "bench deterministic" 90 det.log $PY -m flashsdpa bench --deterministic --rounds 3 --out /tmp/b_det
tail -16 "$OUT/det.log"
W="/tmp/pkg_ww2k/python${SITE:+:$SITE}"
PYTHONPATH="$W" tests "ww2k: causal bwd tests" 60 tests_ww2k.log $PY -m pytest tests/gpu/test_kernels.py tests/gpu/test_training.py \
  -q -p no:cacheprovider -n 8 -k "bwd and causal"
PYTHONPATH="$W" sanitize_subset memcheck 40 tests/gpu/test_kernels.py
((${#failed[@]})) && finish
AB_STOP=$((SECONDS + 150)) bwd_ab_rounds 3 "tree ww2k ww4k" --dims 256 --causal yes --seqlens 2048 4096 8192
finish
