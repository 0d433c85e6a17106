#!/usr/bin/env bash
# session27_sixth.sh: which part of san_short64 raises racecheck's internal "failed to handle a
# hardware exception" (session27_fifth.sh: the whole subset, reproducibly, at its sixth case):
# the case alone, and the tests' bf16 math reference alone at 600 rows.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
narrow_build 170 "64;128"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
RC="compute-sanitizer --tool racecheck --error-exitcode 9 --kernel-name kns=flashsdpa --target-processes all"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timed "racecheck case alone" 90 rc_case.log $RC $PY -m pytest tests/gpu/test_kernels.py -q -x -p no:cacheprovider -k san_short64
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timed "racecheck torch_reduced" 60 rc_tr.log $RC $PY scripts/dev/racecheck_probe.py torch_reduced 600
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timed "racecheck torch_reduced 257" 60 rc_tr257.log $RC $PY scripts/dev/racecheck_probe.py torch_reduced 257
grep -hE "Internal|RACECHECK SUMMARY|passed|failed|ok$" "$OUT"/rc_*.log
finish
