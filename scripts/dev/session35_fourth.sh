#!/usr/bin/env bash
# session35_fourth.sh: racecheck (then memcheck) of test_fwd_many_tiles.py's sanitizer subset with
# its d64 case at 257 rows (session35_third.sh's 600-row case stopped racecheck inside the tests'
# bf16 math reference, as test_kernels.py's san_short64 comment records), on a d64 + d128 build.
#   run(command="bash scripts/dev/session35_fourth.sh", carry=[".whl"], timeout_s=240)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 150 "64;128"
CUDA_LAUNCH_BLOCKING=1 sanitize_subset racecheck 60 tests/gpu/test_fwd_many_tiles.py
sanitize_subset memcheck 40 tests/gpu/test_fwd_many_tiles.py
finish
