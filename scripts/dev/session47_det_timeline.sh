#!/usr/bin/env bash
# session47_det_timeline.sh (session 47), one call, ~2-3 minutes: where deterministic mode's time
# goes at S 2k (issue 13's bar: within 15% of the default mode; d128 2k 1.16x, session 46). The
# backward harness (scripts/dev/bwd_check_sm90.cu) with -DFLASHSDPA_SM90_BWD_TIMELINE=1 stamps one
# CTA's steps; TL_SHAPE / TL_DET pick B 8 x H 16 x S 2k dense, deterministic or not. In launch
# order a dense 2k head's 16 key blocks are CTAs 16h .. 16h + 15 with turns 0 .. 15, so CTA 0 / 15
# are the first wave's turn 0 / 15 and 1000 / 1007 a mid-kernel head's turns 8 / 15. Per step the
# writer's flag wait (w_full -> w_flag: its turn) and w_flag -> w_free (the add issued, landed and
# the turn handed on) against the step's length say which of the two readings holds
# (kernel_notes_bwd_sm90.md, "Outcomes, session 46"): a start-up chain (flag waits on the first
# steps of late turns, then none) or a writer bound (w_flag -> w_free near the step every step).
# (Ran in session 47: kernel_notes_bwd_sm90.md, "The deterministic writer's timeline at 2k".)
# (That run was head-major. Since, dense deterministic calls launch grouped over 9 heads at 2k (the
# harness says 132 SMs): CTA 144g + 9n + h is head 9g + h's key block of turn n.)
# TL_RUN_SHAPE (B,H,S,causal), TL_CTAS, TL_DEFAULT_CTA, TL_SHOW_CTA: another shape's CTAs. Causal 2k
# (the masked order, 32 heads a group at d128: CTA 512g + 32n + h has turn n, 32 - 2n steps):
#   TL_RUN_SHAPE=8,16,2048,1 TL_CTAS="0 100 200 300 1100" TL_DEFAULT_CTA=100 TL_SHOW_CTA=100
#   run(command="bash scripts/dev/session47_det_timeline.sh", carry=[".whl"], timeout_s=240)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
variants=("")
[[ ${TL_FLAGS:-} ]] && variants+=("$TL_FLAGS")  # a variant harness beside the tree's
for vi in "${!variants[@]}"; do
  t0=$(date +%s)
  if bash scripts/dev/build_bwd_check_sm90.sh "/tmp/bwd_tl$vi" "-DFLASHSDPA_SM90_BWD_TIMELINE=1 ${variants[$vi]}" \
      > "$OUT/build$vi.log" 2>&1; then
    step "build $vi" "ok in $(( $(date +%s) - t0 )) s"
  else
    tail -20 "$OUT/build$vi.log"; step "build $vi" FAILED; failed+=("build $vi"); continue
  fi
  for det in 1 0; do
    for cta in ${TL_CTAS:-0 15 1000 1007}; do
      [[ $det == 0 && $cta != "${TL_DEFAULT_CTA:-1007}" ]] && continue  # the default mode: one CTA for its step length
      log="$OUT/tl_v${vi}_det${det}_cta$cta.log"
      TL_SHAPE="${TL_RUN_SHAPE:-8,16,2048,0}" TL_DET=$det timeout 60 "/tmp/bwd_tl$vi" timeline 128 "$cta" > "$log" 2>&1
      rc=$?
      check "timeline v$vi det$det CTA $cta" "$rc"
      step "v$vi det$det CTA $cta" "rc=$rc $(grep '^medians' "$log" | cut -c1-170)"
    done
  done
done
# The first-wave late turn in full: where its first steps wait.
sed -n 1,40p "$OUT/tl_v0_det1_cta${TL_SHOW_CTA:-15}.log" 2>/dev/null | cut -c1-200
finish
