#!/usr/bin/env bash
# session26_second.sh: the decode kernel's block-table prefetch (page ids read one tile ahead) on
# the GPU: test_kvcache.py whole, memcheck on its sanitizer subset, the decode bench's paged /
# contiguous rows (3 rounds); then small_graph_times.py on both families (small shapes' GPU time a
# call in CUDA graphs: does the portable family serve small grids faster than the sm90 one?).
#   run(command="bash scripts/dev/session26_second.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
narrow_build 150 "64;128"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
tests "kvcache tests" 150 kvcache.log $PY -m pytest tests/gpu/test_kvcache.py -q -x -p no:cacheprovider -n 4
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timed "memcheck decode" 90 memcheck.log compute-sanitizer --tool memcheck --error-exitcode 9 \
  $PY -m pytest tests/gpu/test_kvcache.py -q -p no:cacheprovider -k sanitizer_subset
timed "decode bench" 120 bench.log $PY -m flashsdpa bench --decode --rounds 3 --no-memory --no-plot --out /tmp/bench_out
grep -E "paged|B [0-9]+ x" "$OUT/bench.log" | head -20
timed "graph times" 150 graph.log $PY scripts/dev/small_graph_times.py
FLASHSDPA_FAMILY=sm80 timed "graph times (sm80)" 60 graph_sm80.log $PY scripts/dev/small_graph_times.py --only-ours
paste -d' ' <(grep -E "^ *[0-9]|GPU us|^  B" "$OUT/graph.log") <(grep -E "^ *[0-9]|GPU us|^  B" "$OUT/graph_sm80.log" | awk '{print $NF}')
finish
