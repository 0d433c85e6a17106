#!/usr/bin/env bash
# session38_sixth.sh (session 38), one call, ~4 minutes:
#   1. racecheck of test_kvcache's append case alone, in a fresh process (none of our kernels has
#      run before its PyTorch reference): session38_fourth / fifth's racecheck of the subset stopped
#      there on "Internal Sanitizer Error ... hardware exception" inside `_pt` (torch's math SDPA),
#      on the tree too. Prediction: the same stop, i.e. torch's kernels under racecheck, not ours.
#   2. issue 9's small-model rows alone, 9 interleaved rounds (bench --models --model-cases): the
#      3-round run of session38_fifth read small train bf16 1.084x FA2 only while shim_cost.py's 5
#      rounds read -1.12 ms; the per-round spread (enable 11.00-12.67 ms) is larger than the effect.
#      Prediction: enable() / FA2 only within 0.97-1.03 on 9 rounds.
#   3. decode_splits.py's heuristic rows beside cuDNN / flash (the decode bars are the H200's).
#   run(command="bash scripts/dev/session38_sixth.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy models "64;128"
require_copies models
export PYTHONPATH="/tmp/pkg_models/python${SITE:+:$SITE}"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timed "racecheck append alone" 90 san_append.log compute-sanitizer --tool racecheck \
  --error-exitcode 9 --kernel-name kns=flashsdpa --target-processes all \
  $PY -m pytest tests/gpu/test_kvcache.py -q -x -p no:cacheprovider -k sanitizer_subset_append
grep -E "Internal Sanitizer|RACECHECK SUMMARY|passed|failed|line [0-9]+ in " "$OUT/san_append.log" | head -6
timed "decode splits" 60 decode_splits.log $PY scripts/dev/decode_splits.py --splits 0 --cases 1x8192 1x131072 32x4096
cat "$OUT/decode_splits.log"
timed "small model rows, 9 rounds" 330 models_small.log $PY -m flashsdpa bench --models --rounds 9 \
  --model-cases "small train" --out /tmp/models_small
sed -n '/^Models/,/^  (?/p' "$OUT/models_small.log" | head -12
finish
