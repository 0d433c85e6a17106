#!/usr/bin/env bash
# session27_second.sh: the sm90 d64 forward's short tile (kFwdShortTileSm90, 128 rows, chosen by
# tiles_sm90.cu's fwd_sm90_short_tile; off with FLASHSDPA_SPEED_RULES=0): a d64 / d128 build, the
# GPU tests that reach it (default rules: d64 shapes of 513-1024 rows, and the non-causal ones the
# speed rule keeps), the rules-off run (the 192-row tile at every size), memcheck and racecheck on
# test_kernels' sanitizer subset (san_short64 takes the short tile).
#   run(command="bash scripts/dev/session27_second.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
narrow_build 170 "64;128"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
tests "gpu tests" 130 tests.log $PY -m pytest tests/gpu/test_kernels.py tests/gpu/test_sdpa.py tests/gpu/test_training.py tests/gpu/test_fwd_schedule.py -q -p no:cacheprovider -n 8
FLASHSDPA_SPEED_RULES=0 tests "kernels rules off" 60 tests_off.log $PY -m pytest tests/gpu/test_kernels.py -q -p no:cacheprovider -n 8
for tool in memcheck racecheck; do sanitize_subset $tool 150 tests/gpu/test_kernels.py; done
finish
