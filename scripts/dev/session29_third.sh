#!/usr/bin/env bash
# session29_third.sh: why test_sdpa_inside_enable_on_cuda failed run alone (session29_second.sh):
# its cases outside enable() in a fresh process (scripts/dev/bad_inputs_probe.py), then the test alone.
# Run once in session 29 (before the probe's --no-import and forced-backend rows): SDPA of the zero
# batch outside enable() returned None; every other case as PyTorch. Prepared again with those rows.
#   run(command="bash scripts/dev/session29_third.sh", carry=[".whl"], timeout_s=240)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 120 "128;512"
timed "probe" 60 probe.log $PY scripts/dev/bad_inputs_probe.py
timed "probe, no import" 60 probe_noimport.log $PY scripts/dev/bad_inputs_probe.py --no-import
cat "$OUT/probe_noimport.log"
cat "$OUT/probe.log"
tests "the test alone" 60 alone.log $PY -m pytest tests/gpu/test_bad_inputs_gpu.py -q -p no:cacheprovider -k test_sdpa_inside_enable_on_cuda
finish
