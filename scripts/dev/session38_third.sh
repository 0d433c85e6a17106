#!/usr/bin/env bash
# session38_third.sh (prepared in session 37, compiled only): softcap's tanh partly on the FMA pipe
# (FLASHSDPA_SOFTCAP_TANH_FMA = 3 / 4 of every 8; score_mod.cuh's tanh_fma: a degree-11 polynomial,
# |error| <= 8.9e-5, scripts/dev/tanh_fma_fit.py), issue 14's softcap bar (within 10% of plain; the
# sm90 forward's softcap runs at ~70%: two MUFU ops a score, the softmax longer than the ping-pong's
# half period). ptxas 13.0: sm90 forward / backward 0 spills, no C75xx (the d128 modifier kernel
# 4,288 -> 4,912 / 5,128 SASS instructions); the portable modifier kernels spilled before and do a
# little more (36 -> 44 / 52 bytes in one of them). Default 0: SASS byte-identical.
# Prediction (H100): softcap 50 forward 70% -> 76-80% of plain at 8k (3 of 8 ~ 4 of 8), backward
# unchanged (its tanh is recomputed once a step beside a heavier chain); test_features_gpu passes.
#   1. builds: tanh3, tanh4 (bf16 + fp16, d 64 / 128), the tree (bf16, d 64 / 128);
#   2. test_features_gpu.py on both, memcheck of its sanitizer subset on tanh4;
#   3. 3 alternating process rounds of features_timing.py (plain, softcap 50; fwd + bwd), tree /
#      tanh3 / tanh4.
#   run(command="bash scripts/dev/session38_third.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy tree "64;128"
BUILD_DTYPES="bf16;fp16" build_copy tanh3 "64;128" CUDAFLAGS=-DFLASHSDPA_SOFTCAP_TANH_FMA=3
BUILD_DTYPES="bf16;fp16" build_copy tanh4 "64;128" CUDAFLAGS=-DFLASHSDPA_SOFTCAP_TANH_FMA=4
require_copies tree tanh3 tanh4
for name in tanh3 tanh4; do
  PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" tests "$name feature tests" 200 tests_$name.log $PY -m pytest \
    tests/gpu/test_features_gpu.py -q -p no:cacheprovider -n 8
done
PYTHONPATH="/tmp/pkg_tanh4/python${SITE:+:$SITE}" sanitize_subset memcheck 60 tests/gpu/test_features_gpu.py
for round in 1 2 3; do
  for name in tree tanh3 tanh4; do
    PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "$name timing $round" 60 "timing_${name}_$round.log" \
      $PY scripts/dev/features_timing.py --variants plain "softcap 50"
  done
done
for round in 1 2 3; do for name in tree tanh3 tanh4; do
  echo "== $name round $round"; grep -iE "softcap|plain" "$OUT/timing_${name}_$round.log" | head -6
done; done
finish
