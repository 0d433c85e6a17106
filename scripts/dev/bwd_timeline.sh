#!/usr/bin/env bash
# bwd_timeline.sh (session 21, prepared; not yet run): one CTA's dQ hand-over, step by step, in the
# sm90 backward at the bar shape (B 2, H 16, S 8k, non-causal, d128 and d64): the harness
# scripts/dev/bwd_check_sm90.cu built with -DFLASHSDPA_SM90_BWD_TIMELINE=1, for three CTAs (early,
# middle and late in launch order, so a slow wave shows). kernel_notes_bwd_sm90.md, "The dQ
# hand-over's timeline", has the prediction.
#   run(command="bash scripts/dev/bwd_timeline.sh", carry=[".whl"], timeout_s=300)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
t0=$(date +%s)
if bash scripts/dev/build_bwd_check_sm90.sh /tmp/bwd_tl "-DFLASHSDPA_SM90_BWD_TIMELINE=1" > "$OUT/build.log" 2>&1; then
  step build "ok in $(( $(date +%s) - t0 )) s"
else
  tail -20 "$OUT/build.log"; step build FAILED; failed+=(build); finish
fi
for d in 128 64; do
  for cta in 200 1000 1900; do
    timeout 60 /tmp/bwd_tl timeline "$d" "$cta" > "$OUT/timeline_d${d}_$cta.log" 2>&1
    rc=$?
    step "timeline d$d CTA $cta" "rc=$rc $(tail -1 "$OUT/timeline_d${d}_$cta.log" | cut -c1-160)"
    check "timeline d$d CTA $cta" "$rc"
  done
done
finish
