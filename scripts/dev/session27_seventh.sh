#!/usr/bin/env bash
# session27_seventh.sh: racecheck and memcheck of test_kernels' subset with san_short64 at 257 rows.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
narrow_build 170 "64;128"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
for tool in racecheck memcheck; do sanitize_subset $tool 150 tests/gpu/test_kernels.py; done
finish
