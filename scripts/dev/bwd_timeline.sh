#!/usr/bin/env bash
# bwd_timeline.sh (session 21; run in session 22): one CTA's dQ hand-over, step by step, in the
# sm90 backward at the bar shape (B 2, H 16, S 8k, non-causal, d128 and d64): the harness
# scripts/dev/bwd_check_sm90.cu built with -DFLASHSDPA_SM90_BWD_TIMELINE=1, for three CTAs (early,
# middle and late in launch order, so a slow wave shows). kernel_notes_bwd_sm90.md, "The dQ
# hand-over's timeline", has the prediction. Session 36 added the consumer's step in phases
# (warpgroup 0: S^T, the exponentials, dP^T, dS^T and its barrier, dV / dQ), printed after the
# medians: kernel_notes_bwd_sm90.md, "The d128 step in phases" (prepared, not yet run).
# TIMELINE_FLAGS: more nvcc flags for the harness (an A/B macro's variant); TIMELINE_CTAS: the CTAs
# (default "200 1000 1900"); TIMELINE_TAG: a suffix for the logs' names.
#   run(command="bash scripts/dev/bwd_timeline.sh", carry=[".whl"], timeout_s=300)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
t0=$(date +%s)
tag="${TIMELINE_TAG:-}"
if bash scripts/dev/build_bwd_check_sm90.sh /tmp/bwd_tl$tag "-DFLASHSDPA_SM90_BWD_TIMELINE=1 ${TIMELINE_FLAGS:-}" \
    > "$OUT/build$tag.log" 2>&1; then
  step build "ok in $(( $(date +%s) - t0 )) s"
else
  tail -20 "$OUT/build$tag.log"; step build FAILED; failed+=(build); finish
fi
for d in 128 64; do
  for cta in ${TIMELINE_CTAS:-200 1000 1900}; do
    timeout 60 /tmp/bwd_tl$tag timeline "$d" "$cta" > "$OUT/timeline${tag}_d${d}_$cta.log" 2>&1
    rc=$?
    step "timeline$tag d$d CTA $cta" "rc=$rc $(tail -1 "$OUT/timeline${tag}_d${d}_$cta.log" | cut -c1-160)"
    check "timeline$tag d$d CTA $cta" "$rc"
  done
done
finish
