#!/usr/bin/env bash
# session41_combined.sh (session 41), one call, ~9.5 minutes, by priority (refused starts left time
# for one call; the predictions are in the kernel notes, "The warpgroup index ptxas can prove
# uniform" and HALF_FIRST's vote form; the macros are gone: UNIFORM_WG is now the d128 / d256 /
# d64-192 forwards' and the d256 backward's form, HALF_FIRST is scripts/dev/ab/fwd_half_first.patch).
# Builds tree / uw (FLASHSDPA_SM90_UNIFORM_WG=1) / hf
# (FLASHSDPA_SM90_FWD_HALF_FIRST=1, the vote form), bf16 + fp16 d64 / d128 / d256; the whole GPU
# suite on uw and memcheck of its test_kernels subset; the backward A/B tree / uw (3 alternating
# rounds); the forward A/B tree / hf / uw; then, with the time left, hf's forward tests.
# LIMIT (default 595) is the call's limit in seconds: the A/Bs stop in proportion (a shorter call
# after more refused starts).
#   run(command="LIMIT=595 bash scripts/dev/session41_combined.sh", carry=[".whl"], timeout_s=595)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
L=${LIMIT:-595}
BUILD_DTYPES="bf16;fp16" build_copy tree "64;128;256"
BUILD_DTYPES="bf16;fp16" build_copy uw "64;128;256" CUDAFLAGS="-DFLASHSDPA_SM90_UNIFORM_WG=1"
BUILD_DTYPES="bf16;fp16" build_copy hf "64;128;256" CUDAFLAGS="-DFLASHSDPA_SM90_FWD_HALF_FIRST=1"
require_copies tree uw hf
PYTHONPATH="/tmp/pkg_uw/python${SITE:+:$SITE}" tests "uw gpu tests" 140 tests_uw.log $PY -m pytest tests/gpu -q \
  -p no:cacheprovider -n 8 -m "not slow"
PYTHONPATH="/tmp/pkg_uw/python${SITE:+:$SITE}" sanitize_subset memcheck 40 tests/gpu/test_kernels.py
mkdir -p "$OUT/bwd" "$OUT/fwd"
AB_STOP=$(( L - 170 )) ab_rounds "tree uw" 100 --dims 128 64 256 --causal both --seqlens 1024 2048 8192 > "$OUT/ab_bwd_table.txt"
mv "$OUT"/ab_tree.* "$OUT"/ab_uw.* "$OUT/bwd/"
AB_STOP=$(( L - 45 )) ab_rounds "tree hf uw" 60 --forward --dims 128 64 256 --causal both --seqlens 512 1024 2048 8192 \
  > "$OUT/ab_fwd_table.txt"
mv "$OUT"/ab_tree.* "$OUT"/ab_uw.* "$OUT"/ab_hf.* "$OUT/fwd/"
(( SECONDS < L - 65 )) && PYTHONPATH="/tmp/pkg_hf/python${SITE:+:$SITE}" tests "hf fwd tests" $(( L - 10 - SECONDS )) tests_hf.log \
  $PY -m pytest "${FWD_TESTS[@]}" tests/gpu/test_sdpa.py -q -p no:cacheprovider -n 8
echo "== backward (tree / uw)"; cat "$OUT/ab_bwd_table.txt"
echo "== forward (tree / hf / uw)"; cat "$OUT/ab_fwd_table.txt"
finish
