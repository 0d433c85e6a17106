#!/usr/bin/env bash
# session36_fifth.sh: where a step of the head-dim-512 forward goes, from the kernel's own clock
# (scripts/dev/fwd512_timeline.cu; -DFLASHSDPA_SM90_FWD512_TIMELINE=1 stamps each consumer
# warpgroup's step phases in both CTAs of three clusters), the tree's kernel and the timing-only
# build without the exchange (scripts/dev/ab/xchg_diag.patch, FLASHSDPA_SM90_XCHG_DIAG=1: wrong
# values on purpose). B 2 x H 4 x 8k, bf16, non-causal. No Python, no package build: ~1 minute.
# Prediction (H100): a step ~4,300-4,600 cycles with the exchange, ~2,900 without; the exchange
# phase ~1,500-2,000 (dsmem_bench: 1,917 alone, 2,261 under P V's form), S's GEMM wait ~1,000.
#   run(command="bash scripts/dev/session36_fifth.sh", timeout_s=120)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
flags=(-gencode=arch=compute_90a,code=sm_90a -O3 -DNDEBUG --expt-relaxed-constexpr -std=c++17 -lineinfo
       -Ibackend/include -Icuda -Iscripts/dev -DFLASHSDPA_SM90_FWD512_TIMELINE=1)
ROOT=$PWD
rm -rf /tmp/diag_root && mkdir -p /tmp/diag_root/scripts && cp -r cuda backend /tmp/diag_root/ \
  && cp -r scripts/dev /tmp/diag_root/scripts/
(cd /tmp/diag_root && patch -p1 -s < "$ROOT/scripts/dev/ab/xchg_diag.patch") || { failed+=(patch); finish; }
nvcc "${flags[@]}" -o /tmp/fwd512_tl scripts/dev/fwd512_timeline.cu > "$OUT/build.log" 2>&1 &
(cd /tmp/diag_root && nvcc "${flags[@]}" -DFLASHSDPA_SM90_XCHG_DIAG=1 -o /tmp/fwd512_tl_diag1 \
  scripts/dev/fwd512_timeline.cu > "$OUT/build_diag1.log" 2>&1) &
wait
for b in fwd512_tl fwd512_tl_diag1; do
  [[ -x /tmp/$b ]] || { cat "$OUT"/build*.log | tail -20; failed+=("build $b"); }
done
((${#failed[@]})) && finish
timed "timeline tree" 60 timeline_tree.log /tmp/fwd512_tl 3 200 500
timed "timeline no exchange" 60 timeline_diag1.log /tmp/fwd512_tl_diag1 3 200 500
cat "$OUT/timeline_tree.log" "$OUT/timeline_diag1.log"
finish
