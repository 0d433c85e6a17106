#!/usr/bin/env bash
# fwd_ncu.sh: ncu of our sm90 forward kernel and cuDNN's on one shape (scripts/dev/fwd_profile.py),
# exported as per-instruction SASS counters (source page) and section details, for offline reading.
# Run after a package build (scripts/dev/session_gpu.sh builds one), e.g.
#   D=128 S=2048 CAUSAL=1 bash scripts/dev/fwd_ncu.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/fwd_out}"; mkdir -p "$OUT"
tag="d${D:-128}_s${S:-2048}_c${CAUSAL:-1}"
timeout 300 ncu --clock-control none -k regex:'fwd_sm90|cudnn|xmma|sm90' --launch-skip 2 --launch-count 2 \
  --set full -f -o /tmp/ncu_fwd_$tag python3 scripts/dev/fwd_profile.py "${D:-128}" "${S:-2048}" "${CAUSAL:-1}" \
  > /tmp/ncu_fwd_$tag.log 2>&1 || tail -20 /tmp/ncu_fwd_$tag.log
ncu -i /tmp/ncu_fwd_$tag.ncu-rep --page source --csv --print-source sass > "$OUT/fwd_src_$tag.csv" 2>&1
ncu -i /tmp/ncu_fwd_$tag.ncu-rep --page details --csv > "$OUT/fwd_details_$tag.csv" 2>&1
ls -la "$OUT"
