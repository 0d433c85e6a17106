#!/usr/bin/env bash
# session49_third.sh (prepared in session 48, compiled only), one call, ~1-2 minutes: where the
# sliding window's forward loses against dense causal (the bench's window row, B 1 x H 16 x 32k
# tokens, d128, a causal 4096-key window: 0.88x the causal rate on visible pairs in session 48,
# bar 0.9; 1.05x in session 7, before the forward's dynamic schedule). The tile timeline
# (scripts/dev/fwd_timeline.cu, FWD_TL_WINDOW=4096) for the window and for dense causal at 32k,
# CTAs 0 and 77: every tile's phases. A window tile is ~33 key blocks (its first and last masked);
# dense causal's average 128. Prediction: the window's middle blocks at the causal ones' rate
# (~2,860 cycles), its first (diagonal) block's softmax ~+500 cycles as at S 512, and the left-edge
# block inside the loop another ~+500; with ~1.3 blocks of boundary that is ~0.94x, so the other
# ~6% should show as a slower middle-block rate (the 32 MB sections are 2 pairs at 32k: 132 CTAs on
# 2 heads' K / V lines, session 19's L2-slice contention) or as waits for K / V.
#   run(command="bash scripts/dev/session49_third.sh", carry=[".whl"], timeout_s=180)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
dev_build fwd_tl /tmp/fwd_tl -DFLASHSDPA_SM90_FWD_TIMELINE=1 scripts/dev/fwd_timeline.cu cuda/sm90/tiles_sm90.cu || finish
FWD_TL_WINDOW=4096 timed "tl window 4k / 32k" 60 tl_window.log /tmp/fwd_tl 128 32768 1 0 77
timed "tl causal 32k" 60 tl_causal.log /tmp/fwd_tl 128 32768 1 0 77
cat "$OUT"/tl_window.log "$OUT"/tl_causal.log
finish
