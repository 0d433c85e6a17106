#!/usr/bin/env bash
# session50_bias_order.sh (prepared in session 49: compiled only; run in session 50, lost: the define
# now lives in scripts/dev/ab/bias_batch_inner.patch, apply it first), one call, ~4 minutes: the sm90
# kernels' tile orders with the batch innermost where the bias is one plane per head shared by the
# batch (-DFLASHSDPA_BIAS_BATCH_INNER=1; default 0, every sm90 kernel's SASS byte-identical; 0 spills
# with it, bf16 d64 / d128 forward and backward). Issue 14's bias rows (B 8 x H 16 x S 2k, d128, a
# (1, H, S, S) bias) re-read each head's 8 MB plane from DRAM once per batch element today (~1 GB).
# 1. Tree (b0) and variant (b1), bf16 d64 / d128. The variant: the masks' GPU tests (biases shared by
#    the batch among them, gradients, poisoned outputs) and memcheck of one such forward + backward.
# 2. 3 alternating process rounds of `bench --masks` (one round each), the bias and key-padding
#    rows side by side.
# Prediction (kernel_notes_features.md, "The bias plane read once per head"): bias 2k forward
# 418 -> 500-560 TFLOP/s (the ~0.3 ms of re-reads in a ~0.75 ms forward, less what L2 already
# kept), backward 230 -> 240-255 (the same bytes in a ~3.0 ms backward); key padding (a (B, 1, 1,
# S) mask: not shared by the batch, the control) within 2%.
#   run(command="bash scripts/dev/session50_bias_order.sh", carry=[".whl"], timeout_s=360)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
BUILD_DTYPES="bf16" build_copy b0 "64;128"
BUILD_DTYPES="bf16" build_copy b1 "64;128" CUDAFLAGS=-DFLASHSDPA_BIAS_BATCH_INNER=1
require_copies b0 b1
PYTHONPATH="/tmp/pkg_b0/python${SITE:+:$SITE}" tests "b0: masks tests" 200 tests_b0.log $PY -m pytest \
  tests/gpu/test_masks_gpu.py -q -p no:cacheprovider -n 8
PYTHONPATH="/tmp/pkg_b0/python${SITE:+:$SITE}" SAN_K="accumulated and 128 and causal and bf16" \
  sanitize_subset memcheck 120 tests/gpu/test_masks_gpu.py
V="/tmp/pkg_b1/python${SITE:+:$SITE}"
# (test_masks' 1HSS and SS shapes at batch 2 are biases shared by the batch, with their gradients
# and NaN-poisoned outputs; the rest are controls.)
PYTHONPATH="$V" tests "b1: masks tests" 200 tests_b1.log $PY -m pytest tests/gpu/test_masks_gpu.py \
  -q -p no:cacheprovider -n 8
PYTHONPATH="$V" SAN_K="test_masks[ and 1HSS and 113-1023 and add" sanitize_subset memcheck 120 tests/gpu/test_masks_gpu.py
((${#failed[@]})) && finish
# dense: the tree with FLASHSDPA_BIAS_GRAD=dense (the bias gradient's dense buffer and batch sum,
# session 49's path: the control); b0: the tree (the float32 accumulator the batch shares, its
# backward batch-inner); b1: b0 plus the forward's batch-inner order. (As run in session 50 with
# scripts/dev/ab/bias_grad_accumulate.patch in the tree; without it dense and b0 are one build.
# Outcome: kernel_notes_features.md, "The bias plane read once per head".)
for round in 1 2 3; do
  for name in dense b0 b1; do
    pkg=$name; [[ $name == dense ]] && pkg=b0
    FLASHSDPA_BIAS_GRAD=$([[ $name == dense ]] && echo dense) PYTHONPATH="/tmp/pkg_$pkg/python${SITE:+:$SITE}" \
      timed "masks $name $round" 60 "masks_${name}_$round.log" \
      $PY -m flashsdpa bench --masks --rounds 1 --out "/tmp/bm_${name}_$round"
  done
done
for round in 1 2 3; do
  for name in dense b0 b1; do
    echo "== $name round $round"; grep -E "^  (key padding|additive bias)" "$OUT/masks_${name}_$round.log" | cut -c1-40
  done
done | tee "$OUT/bias_order.txt"
finish
