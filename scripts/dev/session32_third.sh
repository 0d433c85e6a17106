#!/usr/bin/env bash
# session32_third.sh: issue 10's zero-batch finding settled (PyTorch's cuDNN SDPA returns None for a
# zero batch, flashsdpa not imported: session32_second.sh's probe); test_sdpa_inside_enable_on_cuda,
# now told so, alone in a fresh process (where it failed in session 29) and with its file.
#   run(command="bash scripts/dev/session32_third.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 200 "64;128"
tests "inside enable, alone" 60 alone.log $PY -m pytest tests/gpu/test_bad_inputs_gpu.py -q -p no:cacheprovider \
  -k test_sdpa_inside_enable_on_cuda
tail -15 "$OUT/alone.log"
tests "bad inputs file" 120 bad_inputs.log $PY -m pytest tests/gpu/test_bad_inputs_gpu.py -q -p no:cacheprovider
tail -5 "$OUT/bad_inputs.log"
finish
