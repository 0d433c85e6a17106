#!/usr/bin/env bash
# bwd_gpu.sh: one device call for backward development: bare CMake build of _C (no pip, so it works
# before the package is complete), then bwd_check.py (args passed through). Logs go to $OUT.
#   bash scripts/dev/bwd_gpu.sh [--check] [--bench] [--quick]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/bwd_out}"; mkdir -p "$OUT"
B=/tmp/bwd_build
t0=$(date +%s)
cmake -S . -B $B -GNinja -DCMAKE_BUILD_TYPE=Release -DFLASHSDPA_CUDA=ON \
  -DFLASHSDPA_ARCHS="${ARCHS:-90}" -DFLASHSDPA_DTYPES="${DTYPES:-bf16;fp16}" \
  -DFLASHSDPA_HEAD_DIMS="${HDIMS:-32;64;96;128;192;256}" \
  -DPython_EXECUTABLE="$(which python3)" -Dpybind11_DIR="$(python3 -c 'import pybind11;print(pybind11.get_cmake_dir())')" \
  -DFLASHSDPA_OUTPUT_DIR=$B/out > "$OUT/build.log" 2>&1 \
  && cmake --build $B --target _C -j "$(nproc)" >> "$OUT/build.log" 2>&1 \
  || { tail -40 "$OUT/build.log"; exit 1; }
echo "build ok in $(( $(date +%s) - t0 )) s"
grep -i "spill" "$OUT/build.log" | grep -i bwd | head
FLASHSDPA_C_DIR=$B/out python3 scripts/dev/bwd_check.py "$@" 2>&1 | tee "$OUT/check.log"
