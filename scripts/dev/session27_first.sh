#!/usr/bin/env bash
# session27_first.sh: main as it landed in session 26 (its review commit's host C++ and the speed
# rule's reasons never ran on the GPU): the GPU tests that cover it (test_kernels three ways as
# gpu_check.sh runs it, test_sdpa, test_training) on a d64 / d128 build, then the model rows of
# the benchmark (issue 9's train step / prefill / generation inside and outside enable(); not
# measured since session 25), 3 rounds.
#   run(command="bash scripts/dev/session27_first.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
narrow_build 170 "64;128"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
tests "gpu tests" 130 tests.log $PY -m pytest tests/gpu/test_kernels.py tests/gpu/test_sdpa.py tests/gpu/test_training.py -q -p no:cacheprovider -n 8
FLASHSDPA_SPEED_RULES=0 tests "kernels rules off" 60 tests_off.log $PY -m pytest tests/gpu/test_kernels.py -q -p no:cacheprovider -n 8
timed "bench models" 200 models.log $PY -m flashsdpa bench --models --rounds 3 --no-plot --out /tmp/bench_models
tail -40 "$OUT/models.log"
finish
