#!/usr/bin/env bash
# session26_fourth.sh: (1) the sm90 family's forward speed rule (tiles_sm90.cu's fwd_sm90_yields:
# short d <= 64 forwards to the portable family) and (2) the decode kernel's shift-and-mask page
# lookup (params.h's page_shift). GPU suite on a d64 / d128 build (bf16 + fp16), test_kernels.py
# again with the rule off, memcheck on the decode subset, paged_probe.py, the decode bench (3
# rounds), small_graph_times.py with the rule on / off / the portable family forced.
#   run(command="bash scripts/dev/session26_fourth.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
narrow_build 150 "64;128"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
tests "gpu tests" 200 tests.log $PY -m pytest tests/gpu -q -p no:cacheprovider -n 8
FLASHSDPA_SPEED_RULES=0 tests "kernels (rules off)" 90 tests_no_rules.log $PY -m pytest tests/gpu/test_kernels.py -q -p no:cacheprovider -n 8
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timed "memcheck decode" 90 memcheck.log compute-sanitizer --tool memcheck --error-exitcode 9 \
  $PY -m pytest tests/gpu/test_kvcache.py -q -p no:cacheprovider -k sanitizer_subset
timed "paged probe" 60 probe.log $PY scripts/dev/paged_probe.py
cat "$OUT/probe.log"
timed "decode bench" 90 bench.log $PY -m flashsdpa bench --decode --rounds 3 --no-memory --no-plot --out /tmp/bench_out
grep -E "paged|B [0-9]+ x" "$OUT/bench.log" | head -20
timed "graph times" 150 graph.log $PY scripts/dev/small_graph_times.py
FLASHSDPA_SPEED_RULES=0 timed "graph times (rules off)" 60 graph_off.log $PY scripts/dev/small_graph_times.py --only-ours
paste -d' ' <(grep -E "^ *[0-9]|GPU us|^  B" "$OUT/graph.log") <(grep -E "^ *[0-9]|GPU us|^  B" "$OUT/graph_off.log" | awk '{print $NF}')
finish
