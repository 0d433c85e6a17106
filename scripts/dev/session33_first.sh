#!/usr/bin/env bash
# session33_first.sh (prepared in session 32, not yet run): the tree after session 32 on the GPU.
# Session 32's kernels are cb82305's (SASS byte-identical), but its Python is new: the efficient road
# for training above head dim 256 (ops.py's _efficient_backward, selection.backward_road, entry.py
# and direct.py). That ran only with test_hdim512.py and test_bad_inputs_gpu.py. So: a bf16 + fp16
# build of head dims 64 / 128 / 256 / 512, the whole GPU suite, the road's speed
# (hdim512_time.py --train against PyTorch's SDPA, which is efficient both ways, 3 rounds), and the
# report's Hugging Face static-cache reduce-overhead generation (issue 10 item 9,
# test_process_crashes.py's new Hugging Face test).
#   run(command="bash scripts/dev/session33_first.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
validate_tree 220 "64;128;256;512" 260
# Issue 10 item 9 with the report's own model (Hugging Face Llama, static cache, reduce-overhead),
# outside and inside enable() in fresh processes (session 33: the forward sweep dropped for it; the
# kernels are session 31's and their sweep ran in sessions 23-32).
tests "hf static reduce-overhead" 240 hf_static.log $PY -m pytest -q -s -p no:cacheprovider \
  tests/gpu/test_process_crashes.py -k hf_static
grep -E "hf static|passed|failed" "$OUT/hf_static.log" | tail -3
if (( SECONDS < 500 )); then
  timed "hdim512 train" 90 hdim512_train.log $PY scripts/dev/hdim512_time.py --rounds 3 --train
  cat "$OUT/hdim512_train.log"
fi
finish
