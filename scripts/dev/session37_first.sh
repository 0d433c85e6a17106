#!/usr/bin/env bash
# Record: ran in session 37 (call 1); FLASHSDPA_SM90_FWD512_XCHG_PARTS was removed after (c1fdd59:
# the parts lost), so it now builds the same kernel three times.
# session37_first.sh (prepared in session 36, compiled only): the head-dim-512 forward's exchange in
# two halves or four quarters (FLASHSDPA_SM90_FWD512_XCHG_PARTS=2 / 4; kernel_notes_features.md,
# "The exchange in halves"), all of it in one call:
#   1. scripts/dev/session36_sixth.sh's timeline A/B (per-step phases, sampled rows against
#      float64, non-causal and causal): ~45 s;
#   2. the package built with each (d512, bf16 + fp16): test_hdim512.py and memcheck / racecheck /
#      synccheck of its sanitizer case;
#   3. 3 alternating process rounds of hdim512_time.py (forward, 2k and 8k, causal and not) against
#      the tree's one part.
# Prediction (H100): halves 8k +8-12% (a step ~3,750 cycles against ~4,180), quarters +12-15%, 2k
# less; tests pass. The winner becomes the only form (the macro and the other branch go).
#   run(command="bash scripts/dev/session37_first.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
mkdir -p "$OUT/sixth"
OUT="$OUT/sixth" bash scripts/dev/session36_sixth.sh > "$OUT/sixth.log" 2>&1
rc=$?
step "timeline A/B" "rc=$rc"
check "timeline A/B" $rc
grep -h "kernel\|check" "$OUT"/sixth/timeline_parts[124]b.log 2>/dev/null
step "timeline checks" "$(grep -c 'check.*: ok' "$OUT/sixth.log") ok of 12"
BUILD_DTYPES="bf16;fp16" build_copy halves "512" CUDAFLAGS=-DFLASHSDPA_SM90_FWD512_XCHG_PARTS=2
BUILD_DTYPES="bf16;fp16" build_copy quarters "512" CUDAFLAGS=-DFLASHSDPA_SM90_FWD512_XCHG_PARTS=4
build_copy tree "512" CUDAFLAGS=
for name in tree halves quarters; do
  ls /tmp/pkg_$name/python/flashsdpa/_C*.so >/dev/null 2>&1 || failed+=("build $name")
done
((${#failed[@]})) && finish
for name in halves quarters; do
  PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" tests "hdim512 $name" 120 hdim512_$name.log \
    $PY -m pytest tests/gpu/test_hdim512.py -q -p no:cacheprovider -n 4
  for tool in memcheck racecheck synccheck; do
    PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" sanitize_subset $tool 60 tests/gpu/test_hdim512.py
  done
done
for round in 1 2 3; do
  for name in tree halves quarters; do
    PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "$name fwd $round" 60 "${name}_fwd_$round.log" \
      $PY scripts/dev/hdim512_time.py --rounds 1 --seqlens 2048 8192
  done
done
for round in 1 2 3; do
  for name in tree halves quarters; do echo "== $name fwd round $round"; grep "^B " "$OUT/${name}_fwd_$round.log" | cut -c1-40; done
done
finish
