#!/usr/bin/env bash
# session27_seventh.sh: racecheck and memcheck of test_kernels' subset with san_short64 at 257 rows.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
narrow_build 170 "64;128"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
for tool in racecheck memcheck; do
  filter=(); [[ $tool == racecheck ]] && filter=(--kernel-name kns=flashsdpa)
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timed "sanitizer $tool" 150 san_$tool.log compute-sanitizer --tool $tool --error-exitcode 9 \
    "${filter[@]}" --target-processes all $PY -m pytest tests/gpu/test_kernels.py -q -x -p no:cacheprovider -k sanitizer_subset
done
finish
