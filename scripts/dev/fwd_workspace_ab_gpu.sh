#!/usr/bin/env bash
# fwd_workspace_ab_gpu.sh: session 13's fourth device call: narrow build, then the training
# forward's A/B again (scripts/dev/fwd_workspace_ab.py, 5 rounds), now with enable() entered once
# around the SDPA variant's timing (call 3 entered it per call and timed the activation).
#   run(command="bash scripts/dev/fwd_workspace_ab_gpu.sh", carry=[".whl"], timeout_s=400)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 150 "64;128;256"
timed "A/B workspace (grad)" 150 ab.log $PY scripts/dev/fwd_workspace_ab.py --rounds 5
tail -9 "$OUT/ab.log"
finish
