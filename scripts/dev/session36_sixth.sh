#!/usr/bin/env bash
# Record: ran in session 37 (call 1); FLASHSDPA_SM90_FWD512_XCHG_PARTS was removed after (c1fdd59:
# the parts lost), so it now builds the same kernel three times.
# session36_sixth.sh: the head-dim-512 forward's exchange in two halves or four quarters
# (-DFLASHSDPA_SM90_FWD512_XCHG_PARTS=2 / 4: each part's partials added and folded into the softmax
# while the later parts are in flight) against the tree's one part, through
# scripts/dev/fwd512_timeline.cu (per-step phases from the kernel's clock, the kernel's time with the
# stamps, sampled rows of O and LSE against float64), non-causal and causal, B 2 x H 4 x 8k, bf16.
# Why: session36_fifth.sh's timeline puts a step at ~4,180 cycles: S's GEMM ~1,165, the exchange
# 1,772 (P V under it), then the softmax 907 with the tensor pipe idle.
# Prediction (H100): halves: the softmax after the exchange ~450-500 cycles (half of it moved under
# the second half's flight), a step ~3,750, the kernel ~10% faster; quarters: ~250-350 after it if
# the parts land spread out (their extra reductions cost ~100), ~12-15%; O / LSE errors as the tree's.
#   run(command="bash scripts/dev/session36_sixth.sh", timeout_s=120)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
flags=(-gencode=arch=compute_90a,code=sm_90a -O3 -DNDEBUG --expt-relaxed-constexpr -std=c++17 -lineinfo
       -Ibackend/include -Icuda -Iscripts/dev -DFLASHSDPA_SM90_FWD512_TIMELINE=1)
nvcc "${flags[@]}" -o /tmp/fwd512_tl1 scripts/dev/fwd512_timeline.cu > "$OUT/build1.log" 2>&1 &
nvcc "${flags[@]}" -DFLASHSDPA_SM90_FWD512_XCHG_PARTS=2 -o /tmp/fwd512_tl2 scripts/dev/fwd512_timeline.cu \
  > "$OUT/build2.log" 2>&1 &
nvcc "${flags[@]}" -DFLASHSDPA_SM90_FWD512_XCHG_PARTS=4 -o /tmp/fwd512_tl4 scripts/dev/fwd512_timeline.cu \
  > "$OUT/build4.log" 2>&1 &
wait
for b in 1 2 4; do [[ -x /tmp/fwd512_tl$b ]] || { tail -20 "$OUT/build$b.log"; failed+=("build $b"); }; done
((${#failed[@]})) && finish
for round in "" b; do
  for b in 1 2 4; do
    timed "timeline parts $b $round" 60 timeline_parts$b$round.log /tmp/fwd512_tl$b 3 200
  done
done
for f in parts1 parts2 parts4; do echo "######## $f"; cat "$OUT/timeline_$f.log"; done
grep -h "kernel\|check" "$OUT"/timeline_parts1b.log "$OUT"/timeline_parts2b.log "$OUT"/timeline_parts4b.log
finish
