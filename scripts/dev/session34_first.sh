#!/usr/bin/env bash
# session34_first.sh (prepared in session 33, not yet run): what session 33 (H100 only, most of
# its device time lost to refused starts) left for an H200.
# - The whole GPU suite but the slow subprocess tests, on a bf16 + fp16 64 / 128 / 256 / 512 build:
#   session 33's Python (roads.py's length rule for SDPA's training road, test_hdim512's two new and
#   changed tests) has run only on the CPU.
# - test_process_crashes.py's Hugging Face test in its final form (bare PyTorch against inside
#   enable(), with inductor's static launcher and without; its four children ran one by one on
#   the H100 through hf_static_probe.py): ~4 minutes, so last.
# - The road's A/B (hdim512_time.py --train --road-asis: the (B, S, H, D) copies left out) at 2k,
#   4k and 8k keys: the cause of the 0.91x at 2k causal, and the 4k row the length rule needs.
#   run(command="bash scripts/dev/session34_first.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
validate_tree 220 "64;128;256;512" 200
timed "road A/B" 150 road_ab.log $PY scripts/dev/hdim512_time.py --rounds 3 --train --road-asis --seqlens 2048 4096 8192
cat "$OUT/road_ab.log"
if (( SECONDS < 330 )); then
  tests "hf static reduce-overhead" 260 hf_static.log $PY -m pytest -q -s -p no:cacheprovider \
    tests/gpu/test_process_crashes.py -k hf_static
  grep -E "hf static|passed|failed" "$OUT/hf_static.log" | tail -4
fi
finish
