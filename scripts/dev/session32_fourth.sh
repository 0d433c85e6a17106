#!/usr/bin/env bash
# session32_fourth.sh: training above head dim 256 on the efficient road (our 512 forward, PyTorch's
# efficient backward on its output and LSE: ops.py's _efficient_backward, selection.backward_road):
# test_hdim512.py on a bf16 + fp16 128 / 512 build, then the bad-input tests (the direct API's
# refusals changed).
#   run(command="bash scripts/dev/session32_fourth.sh", carry=[".whl"], timeout_s=300)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 150 "128;512"
tests "hdim512" 90 hdim512.log $PY -m pytest tests/gpu/test_hdim512.py -q -p no:cacheprovider -n 8
tests "bad inputs" 40 bad_inputs.log $PY -m pytest tests/gpu/test_bad_inputs_gpu.py -q -p no:cacheprovider
finish
