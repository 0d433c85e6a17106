#!/usr/bin/env bash
# session34_first.sh: the head-dim-512 backward of our own (bwd_kernel_sm90.cuh's kSplit: the d256
# tile on each CTA of a pair, S^T / dP^T partials exchanged through distributed shared memory),
# first run: a bf16 + fp16 64 / 128 / 256 / 512 build; test_hdim512.py (forward and backward against
# the float64 textbook, NaN-poisoned gradients); compute-sanitizer memcheck / racecheck / synccheck
# on its sanitizer case; the backward alone and forward + backward against PyTorch's SDPA (its
# efficient kernel at D 512); then the GPU suite but its slow tests, as time allows.
#   run(command="bash scripts/dev/session34_first.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 240 "64;128;256;512"
grep -A3 "bwd_sm90_kernel.*Li512E" "$OUT/build.log" | grep -E "registers|spill" | head -4
tests "hdim512" 120 hdim512.log $PY -m pytest tests/gpu/test_hdim512.py -q -p no:cacheprovider -n 4
for tool in memcheck racecheck synccheck; do sanitize_subset $tool 60 tests/gpu/test_hdim512.py; done
timed "d512 bwd timing" 90 bwd512.log $PY scripts/dev/hdim512_time.py --rounds 3 --bwd --seqlens 2048 8192
cat "$OUT/bwd512.log"
timed "d512 train timing" 90 train512.log $PY scripts/dev/hdim512_time.py --rounds 3 --train --seqlens 2048 8192
cat "$OUT/train512.log"
if (( SECONDS < 380 )); then
  tests "gpu tests" $(( 570 - SECONDS )) tests.log $PY -m pytest tests/gpu -q -p no:cacheprovider -n 8 -m "not slow" \
    --ignore=tests/gpu/test_hdim512.py
fi
finish
