#!/usr/bin/env bash
# session27_fourth.sh: the narrowed speed rule (causal d <= 64, <= 256 rows and keys, <= 2 waves
# of 128-row tiles; the rest on the sm90 short tile): the GPU tests; the racecheck question of
# session27_second.sh (racecheck_probe.py: our kernels alone, torch's math alone, at 600 and 257
# rows; then the subset without san_short64); graph times with the rule.
#   run(command="bash scripts/dev/session27_fourth.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
narrow_build 170 "64;128"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
tests "gpu tests" 130 tests.log $PY -m pytest tests/gpu/test_kernels.py tests/gpu/test_sdpa.py tests/gpu/test_training.py tests/gpu/test_fwd_schedule.py -q -p no:cacheprovider -n 8
RC="compute-sanitizer --tool racecheck --error-exitcode 9 --kernel-name kns=flashsdpa --target-processes all"
for side in ours torch; do
  for sq in 600 257; do
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timed "racecheck $side $sq" 60 rc_${side}_$sq.log $RC $PY scripts/dev/racecheck_probe.py $side $sq
  done
done
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timed "racecheck subset" 150 san_racecheck.log $RC $PY -m pytest tests/gpu/test_kernels.py -q -x \
  -p no:cacheprovider -k "sanitizer_subset and not san_short64"
timed "graph times" 50 graph.log $PY scripts/dev/small_graph_times.py --only-ours --dims 64 --rounds 9 --check
grep -E "^ *[0-9]|FAIL" "$OUT/graph.log"
finish
