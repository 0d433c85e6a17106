#!/usr/bin/env bash
# session38_fourth.sh (session 38), one call, ~5 minutes: issue 11's split combine with its row's
# addresses prefetched into L2 before its grid-dependency wait (FLASHSDPA_COMBINE_PREFETCH=1,
# split_combine.cuh). The combine timeline of session38_first.sh put the LSEs at ~1.0-1.3 us after
# the release (one L2 round trip is ~0.3). Prediction: if address translation (a cold TLB on the
# combine's SMs after the decode grid's 33 MB of K / V) is the rest, "LSEs reduced" moves to ~0.5
# us after the release and B 1 x 8k's graph time drops ~0.5-0.8 us; if it is the L2 itself, no
# change. B 32 x 4k (one split, no combine) unchanged either way.
#   run(command="bash scripts/dev/session38_fourth.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
dev_build decode_tl /tmp/decode_tl -DFLASHSDPA_GRID_TIMELINE=1 scripts/dev/decode_timeline.cu
dev_build decode_tl_pf /tmp/decode_tl_pf -DFLASHSDPA_GRID_TIMELINE=1 -DFLASHSDPA_COMBINE_PREFETCH=1 scripts/dev/decode_timeline.cu
for round in 1 2; do
  for name in decode_tl decode_tl_pf; do
    [[ -x /tmp/$name ]] && timed "$name $round" 60 "${name}_$round.log" /tmp/$name
  done
done
for name in decode_tl decode_tl_pf; do
  echo "== $name"; grep -E "^B|combine" "$OUT/${name}_1.log" "$OUT/${name}_2.log" | cut -c1-200
done
build_copy tree "128"
BUILD_DTYPES="bf16;fp16" build_copy pf "64;128;256" CUDAFLAGS=-DFLASHSDPA_COMBINE_PREFETCH=1
require_copies tree pf
PYTHONPATH="/tmp/pkg_pf/python${SITE:+:$SITE}" tests "prefetch decode tests" 150 tests_pf.log $PY -m pytest \
  tests/gpu/test_kvcache.py tests/gpu/test_masked_decode_gpu.py -q -p no:cacheprovider -n 8
for tool in memcheck racecheck; do
  PYTHONPATH="/tmp/pkg_pf/python${SITE:+:$SITE}" sanitize_subset $tool 90 tests/gpu/test_kvcache.py
done
for round in 1 2 3; do
  for name in tree pf; do
    (( SECONDS > 540 )) && break 2
    PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "splits $name $round" 60 "splits_${name}_$round.log" \
      $PY scripts/dev/decode_splits.py --splits 0 33 --cases 1x8192 1x131072 32x4096
  done
done
for name in tree pf; do echo "== $name"; cat "$OUT"/splits_${name}_*.log; done
finish
