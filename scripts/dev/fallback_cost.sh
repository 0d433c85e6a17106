#!/usr/bin/env bash
# fallback_cost.sh (session 19): where a call flashsdpa does not serve (float32: PyTorch's efficient
# kernel behind our Python router) pays inside enable(): per-call wall time of F.sdpa with grad +
# backward, without grad, and of the aten efficient op directly (the router alone), outside /
# inside enable(), interleaved (small_fp32_profile.py --calls, part 4); then the small fp32
# model's step timing and profile (parts 1-3). One d128 bf16 build. Table last.
#   run(command="bash scripts/dev/fallback_cost.sh", carry=[".whl"], timeout_s=300)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy base "128" CUDAFLAGS=
for mode in cxx python; do
  FLASHSDPA_ROUTERS=$([[ $mode == python ]] && echo python || echo auto) PYTHONPATH="/tmp/pkg_base/python:$SITE" \
    timed "per call fp32 ($mode)" 80 calls_$mode.log $PY scripts/dev/small_fp32_profile.py --calls --steps 5
  sed -n '/^4\./,/^5\./p' "$OUT/calls_$mode.log"
done
PYTHONPATH="/tmp/pkg_base/python:$SITE" timed "per call bf16" 80 calls_bf16.log $PY scripts/dev/small_fp32_profile.py --calls --steps 5 --dtype bf16
sed -n '/^4\./,/^5\./p' "$OUT/calls_bf16.log"
PYTHONPATH="/tmp/pkg_base/python:$SITE" timed "model fp32" 100 model_fp32.log $PY scripts/dev/small_fp32_profile.py --pairs 9
head -3 "$OUT/model_fp32.log"
finish
