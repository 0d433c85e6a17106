#!/usr/bin/env bash
# session34_fuzz512.sh: the GPU fuzz test on a 512-only build (bf16 + fp16) with the light exchange:
# every example whose head dims fall in the 512 bucket runs (the others have no bucket here and
# return early), 150 derandomized examples.
#   run(command="bash scripts/dev/session34_fuzz512.sh", carry=[".whl"], timeout_s=120)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 60 "512"
FLASHSDPA_FUZZ_EXAMPLES=150 tests "fuzz 512" 50 fuzz512.log $PY -m pytest tests/gpu/test_fuzz_gpu.py -q -p no:cacheprovider
finish
