#!/usr/bin/env bash
# session48_fwd_causal_tl.sh (session 48), one call, ~2 minutes: the sm90 forward's causal-only cost
# at S 512 (issue 12: d128 causal S 512 0.85x cuDNN, d64 0.84x, d256 0.91x; every other cell of the
# d128 sweep >= 0.98x). The sweep (session 48, H100) has our d128 causal S 512 at 0.89 of our
# non-causal time for 10 / 16 of its key blocks (cuDNN 0.79); with the non-causal tile of session 37
# (15,112 cycles: 4 blocks of ~2,860 + ~3,650 of boundary) the causal tiles should take ~43k cycles
# per head's 4 tiles, the sweep says ~54k. scripts/dev/fwd_timeline.cu now prints every tile's
# phases for causal runs (FWD_TL_RAW=1: also non-causal), so the extra can be put on a phase and a
# tile length. Prediction: the 1- and 2-block tiles' periods exceed blocks x 2,860 + 3,650 by
# ~2,000-3,000 cycles each, in the masked first block's softmax and the K wait (the diagonal block
# is a tile's first and its K is not prefetched under a previous tile's work).
#   run(command="bash scripts/dev/session48_fwd_causal_tl.sh", carry=[".whl"], timeout_s=240)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
dev_build fwd_tl /tmp/fwd_tl -DFLASHSDPA_SM90_FWD_TIMELINE=1 scripts/dev/fwd_timeline.cu cuda/sm90/tiles_sm90.cu || finish
timed "tl d128 S512 causal" 60 tl_128_512_1.log /tmp/fwd_tl 128 512 1 0 77
FWD_TL_RAW=1 timed "tl d128 S512" 60 tl_128_512_0.log /tmp/fwd_tl 128 512 0 0
timed "tl d64 S512 causal" 60 tl_64_512_1.log /tmp/fwd_tl 64 512 1 0
timed "tl d128 1k causal" 60 tl_128_1024_1.log /tmp/fwd_tl 128 1024 1 0
cat "$OUT"/tl_*.log
finish
