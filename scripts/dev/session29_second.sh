#!/usr/bin/env bash
# session29_second.sh: the two tests the full build failed in session29's first call
# (session28_first.sh: test_direct_api_on_cuda's head_dim 264 case, the fuzz drawing backward
# cases at head dims the backward lacks), fixed, on a build of every head dim (sm_90 SASS), with
# the kernel tests beside them (the d64 tall step among the wide buckets).
#   run(command="bash scripts/dev/session29_second.sh", carry=[".whl"], timeout_s=400)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 200 "32;64;96;128;192;256;512"
tests "bad inputs + fuzz" 120 fixed.log $PY -m pytest tests/gpu/test_bad_inputs_gpu.py tests/gpu/test_fuzz_gpu.py \
  -q -p no:cacheprovider -n 8
tests "kernel tests" 150 kernels.log $PY -m pytest tests/gpu/test_kernels.py tests/gpu/test_hdim512.py -q -p no:cacheprovider -n 8
finish
