#!/usr/bin/env bash
# bwd_ncu.sh: ncu of our backward main kernel and PyTorch's FA2 backward kernel on one shape each,
# exported as per-instruction SASS counters (source page) and section details, for offline reading.
#   DIMS="64 128" S=4096 bash scripts/dev/bwd_ncu.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/bwd_out}"; mkdir -p "$OUT"
B=/tmp/bncu
cmake -S . -B $B -GNinja -DCMAKE_BUILD_TYPE=Release -DFLASHSDPA_CUDA=ON -DFLASHSDPA_ARCHS=90 \
  -DFLASHSDPA_DTYPES=bf16 -DFLASHSDPA_HEAD_DIMS="64;128" -DCMAKE_CUDA_FLAGS="${FLAGS:-}" \
  -DPython_EXECUTABLE="$(which python3)" -Dpybind11_DIR="$(python3 -c 'import pybind11;print(pybind11.get_cmake_dir())')" \
  -DFLASHSDPA_OUTPUT_DIR=$B/out > /tmp/bncu_build.log 2>&1 && cmake --build $B --target _C -j "$(nproc)" >> /tmp/bncu_build.log 2>&1 \
  || { tail -30 /tmp/bncu_build.log; exit 1; }
for d in ${DIMS:-64 128}; do
  FLASHSDPA_C_DIR=$B/out timeout 200 ncu --clock-control none -k regex:'dkdv|dq_dk_dv' --launch-skip 2 --launch-count 2 \
    --set full -f -o /tmp/ncu_d$d python3 scripts/dev/bwd_profile.py $d ${S:-4096} ${CAUSAL:-0} > /tmp/ncu_d$d.log 2>&1 \
    || tail -20 /tmp/ncu_d$d.log
  ncu -i /tmp/ncu_d$d.ncu-rep --page source --csv --print-source sass > "$OUT/src_d$d.csv" 2>&1
  ncu -i /tmp/ncu_d$d.ncu-rep --page details --csv > "$OUT/details_d$d.csv" 2>&1
  ls -la "$OUT"
done
