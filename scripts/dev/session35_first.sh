#!/usr/bin/env bash
# session35_first.sh (prepared in session 34, run in session 35; the early-dV switch it builds was
# removed after, its numbers in kernel_notes_bwd_sm90.md): the whole GPU suite on the tree as it is
# (session 34 ran its new d512 backward's tests, sanitizers and the rest of the suite in separate H100
# calls; an H200 should run it all once), then the d512 backward's early-dV variant
# (FLASHSDPA_SM90_BWD512_EARLY_DV=1: dV's GEMM issued before the dP^T exchange, which then runs under
# it; kernel_notes_bwd_sm90.md, "The d512 tile") against the tree's build: test_hdim512 and the
# sanitizers on the variant, 3 interleaved process rounds of hdim512_time.py --bwd.
#   run(command="bash scripts/dev/session35_first.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
validate_tree 240 "64;128;256;512" 230
rm -rf /tmp/pkg_tree && mkdir -p /tmp/pkg_tree && cp -r python /tmp/pkg_tree/  # (build_copy removes python/'s _C)
BUILD_DTYPES="bf16;fp16" build_copy early "512" CUDAFLAGS=-DFLASHSDPA_SM90_BWD512_EARLY_DV=1
PYTHONPATH="/tmp/pkg_early/python${SITE:+:$SITE}" tests "hdim512 early" 90 hdim512_early.log \
  $PY -m pytest tests/gpu/test_hdim512.py -q -p no:cacheprovider -n 4
for tool in memcheck racecheck; do
  PYTHONPATH="/tmp/pkg_early/python${SITE:+:$SITE}" sanitize_subset $tool 40 tests/gpu/test_hdim512.py
done
for round in 1 2 3; do
  for name in tree early; do
    PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "$name bwd $round" 40 "${name}_bwd_$round.log" \
      $PY scripts/dev/hdim512_time.py --rounds 1 --bwd --seqlens 2048 8192
  done
done
for round in 1 2 3; do for name in tree early; do
  echo "== $name bwd round $round"; grep "^B " "$OUT/${name}_bwd_$round.log"
done; done
finish
