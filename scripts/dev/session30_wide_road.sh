#!/usr/bin/env bash
# session30_wide_road.sh (prepared in session 29, not yet run): branch wip/wide-eff-road's first GPU
# run. Check the branch out here first (`git checkout wip/wide-eff-road`): the device gets this
# working tree. A build with the 512 bucket, then the tests its change touches: test_hdim512
# (the training test: our wide forward at the efficient op, PyTorch's efficient backward on our
# output and LSE, the rule on dq / dk / dv), the C++ routers' tests (native_reason's new cut at
# head dim 256), the SDPA and bad-input suites (unmasked calls below 256 still PyTorch's).
#   run(command="bash scripts/dev/session30_wide_road.sh", carry=[".whl"], timeout_s=400)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 200 "64;128;512"
tests "wide road tests" 200 wide.log $PY -m pytest tests/gpu/test_hdim512.py tests/gpu/test_cxx_routers.py \
  tests/gpu/test_sdpa.py tests/gpu/test_bad_inputs_gpu.py tests/gpu/test_masks_gpu.py -q -p no:cacheprovider -n 8
finish
