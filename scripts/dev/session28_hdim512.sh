#!/usr/bin/env bash
# session28_hdim512.sh: the head-dim-512 forward's first run in the package (bf16 + fp16, buckets
# 64 / 128 / 512: the d64 / d128 kernels' tests run too): its GPU tests, the forward kernel tests,
# memcheck and racecheck of its sanitizer case, the timing against PyTorch's SDPA at D 512, and the
# decode bench's paged bar row (decode variant 5 adopted).
#   run(command="bash scripts/dev/session28_hdim512.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 240 "64;128;512"
tests "hdim512 tests" 150 hdim512.log $PY -m pytest tests/gpu/test_hdim512.py -q -p no:cacheprovider -rs
tests "kernel tests" 200 kernels.log $PY -m pytest tests/gpu/test_kernels.py tests/gpu/test_sdpa.py -q -p no:cacheprovider -n 8
sanitize_subset memcheck 90 tests/gpu/test_hdim512.py
sanitize_subset racecheck 120 tests/gpu/test_hdim512.py
timed "hdim512 timing" 100 hdim512_time.log $PY scripts/dev/hdim512_time.py --rounds 3
cat "$OUT/hdim512_time.log"
finish
