#!/usr/bin/env bash
# session31_badinputs.sh: test_bad_inputs_gpu.py (session31_final.sh's suite could not import it:
# this checkout had no .whl/ with expecttest) and test_hdim512.py, the review's direct-API changes.
#   run(command="bash scripts/dev/session31_badinputs.sh", carry=[".whl"], timeout_s=220)
#   DIMS="64;128;256;512" SELECT="refused or training": the 512 bucket's direct-API refusal.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 110 "${DIMS:-64;128;192;256}"
tests "bad inputs + hdim512" 60 tests.log $PY -m pytest tests/gpu/test_bad_inputs_gpu.py tests/gpu/test_hdim512.py ${SELECT:+-k "$SELECT"} \
  -q -p no:cacheprovider -n 8
finish
