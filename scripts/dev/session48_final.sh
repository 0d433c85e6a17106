#!/usr/bin/env bash
# session48_final.sh (session 48), one short call (~2 minutes): the tree's final form of the wave
# groups (the forward's sections at <= 4 query blocks, the backward's plain-kernel launch groups at
# <= 8 key blocks): the backward and schedule tests on a bf16 d64 / d128 build, the grid-order host
# replay's GPU-side twin (the deterministic tests), memcheck of test_kernels' sanitizer subset if
# time allows, and one round of bwd_ab.py (backward, causal, S 512 / 1k: expected ~1.0x / ~0.97x
# cuDNN at d128, from 0.83 / 0.84; d64 unchanged, its grouped kernel keeps the L2 group), and one
# round of `bench --deterministic`, whose causal 1k cases are new: deterministic mode keeps the L2
# group there while the default mode now takes wave groups (prediction: d128 1k causal 1.2-1.35x).
#   run(command="bash scripts/dev/session48_final.sh", carry=[".whl"], timeout_s=150)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
BUILD_DTYPES="bf16" build_copy fin "64;128"
require_copies fin
export PYTHONPATH="/tmp/pkg_fin/python${SITE:+:$SITE}"
tests "bwd + schedule tests" 50 tests.log $PY -m pytest tests/gpu/test_kernels.py tests/gpu/test_fwd_schedule.py \
  -q -p no:cacheprovider -n 8 -k "bwd or determin or schedule or dynamic"
timed "bwd_ab causal" 30 ab.log $PY scripts/dev/bwd_ab.py --rounds 1 --dims 128 64 --causal yes --seqlens 512 1024
cat "$OUT/ab.log" | tail -12
(( SECONDS < 95 )) && timed "bench deterministic" 25 det.log $PY -m flashsdpa bench --deterministic --rounds 1 --out /tmp/b_det \
  && grep -E "causal|FAIL|PASS" "$OUT/det.log" | tail -8
(( SECONDS < 110 )) && sanitize_subset memcheck 15 tests/gpu/test_kernels.py
finish
