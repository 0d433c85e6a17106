#!/usr/bin/env bash
# session39_second.sh (prepared in session 38, compiled only), one call, ~6 minutes: issue 11's
# decode kernel launched programmatically (FLASHSDPA_DECODE_PDL=1): it waits for its predecessor
# at its very start (PREEXIT then ACQBULK, no global read before: cuobjdump), and the split
# combine lets the next launch as it begins. Back-to-back decode calls (the bench's 20-call graph)
# then find the next call's grid resident when the combine ends. Session 38 (H100): B 1 x 8k 18.8
# us a call in that graph against ~10 us of K / V at the card's copy rate, the combine ending ~2.3
# us after the last decode CTA. Default off: decode + combine SASS byte-identical.
# Prediction (H100): B 1 x 8k -0.5 to -1.0 us (18.8 -> ~18.0, at or under cuDNN's 18.3-18.8); B 1 x
# 128k and B 32 x 4k -0.5 to -1 us (< 1%); the generation rows within their noise (there the decode
# follows PyTorch's kernels, which do not trigger early: only the launch overlaps).
#   run(command="bash scripts/dev/session39_second.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy tree "64;128"
BUILD_DTYPES="bf16;fp16" build_copy pdl "64;128;256" CUDAFLAGS=-DFLASHSDPA_DECODE_PDL=1
require_copies tree pdl
PYTHONPATH="/tmp/pkg_pdl/python${SITE:+:$SITE}" tests "pdl decode tests" 200 tests_pdl.log $PY -m pytest \
  tests/gpu/test_kvcache.py tests/gpu/test_masked_decode_gpu.py tests/gpu/test_generation.py tests/gpu/test_streams.py \
  -q -p no:cacheprovider -n 8
for tool in memcheck synccheck racecheck; do
  # (racecheck stopped at the append case inside PyTorch's reference, session 38; with
  # FLASHSDPA_UNDER_SANITIZER=1 that reference runs on the CPU: tests/helpers.py)
  filter=(); [[ $tool == racecheck ]] && filter=(--kernel-name kns=flashsdpa)
  PYTHONPATH="/tmp/pkg_pdl/python${SITE:+:$SITE}" FLASHSDPA_UNDER_SANITIZER=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    timed "sanitizer $tool" 90 san_$tool.log \
    compute-sanitizer --tool $tool --error-exitcode 9 "${filter[@]}" --target-processes all $PY -m pytest tests/gpu/test_kvcache.py \
    -q -x -p no:cacheprovider -k sanitizer_subset
done
splits_rounds "tree pdl"
# What a decode call costs the host (shim_cost.py's decode rows, new in session 38): the generation
# rows are host-bound, so this says what of them is ours.
for name in tree pdl; do
  PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "shim cost $name" 120 "shim_$name.log" \
    $PY scripts/dev/shim_cost.py --rounds 5 --calls 300
  grep -A5 "^decode call" "$OUT/shim_$name.log"
done
for name in tree pdl; do
  (( SECONDS > 420 )) && break
  PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "generation rows $name" 120 "gen_$name.log" \
    $PY -m flashsdpa bench --models --model-cases generate --rounds 3 --out /tmp/gen_$name
  sed -n '/^Models/,/^  (?/p' "$OUT/gen_$name.log" | head -6
done
finish
