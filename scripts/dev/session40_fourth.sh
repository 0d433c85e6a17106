#!/usr/bin/env bash
# session40_fourth.sh (session 40), one call, ~2-3 minutes: session40_third.sh's whole-suite run
# failed test_dropout_gpu.py::test_cuda_graph_fresh_masks_per_replay once (a captured replay's
# dropout mask differed from PyTorch's), which passed in session 37's full suite and in both of
# this session's earlier variant runs. Repeat it: the probe (20 repetitions in one process, each
# replay's (seed, offset) on both sides), the test alone 6 times, the dropout file under -n 8 twice.
#   run(command="bash scripts/dev/session40_fourth.sh", carry=[".whl"], timeout_s=300)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
BUILD_DTYPES="fp16" build_copy tree "128"
require_copies tree
export PYTHONPATH="/tmp/pkg_tree/python${SITE:+:$SITE}"
timed "probe" 90 probe.log $PY scripts/dev/dropout_graph_probe.py --reps 20
tail -22 "$OUT/probe.log"
for i in 1 2 3 4 5 6; do
  timed "test alone $i" 40 alone_$i.log $PY -m pytest tests/gpu/test_dropout_gpu.py -q -p no:cacheprovider \
    -k test_cuda_graph_fresh_masks_per_replay
done
for i in 1 2; do
  tests "dropout file -n 8, $i" 90 file_$i.log $PY -m pytest tests/gpu/test_dropout_gpu.py -q -p no:cacheprovider -n 8
done
finish
