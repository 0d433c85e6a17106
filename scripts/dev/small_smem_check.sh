#!/usr/bin/env bash
# small_smem_check.sh: the backward/forward tiles of GPUs with less shared memory per block than
# an H100/H200 (A100 163 KB, RTX 30xx/40xx 99 KB), checked on an H200 in one device call:
# FLASHSDPA_MAX_SMEM_PER_BLOCK caps what _C believes the GPU allows, and an sm_80-only build runs
# through the driver's PTX JIT, so the sm_8x code paths (register dQ reds, 32-bit P/dS stores)
# run too. Correctness only (bwd_check.py --check); head-dim pairs with no fitting tile are
# expected to be refused (they fall back in the package).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/bwd_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
pyb="$(python3 -c 'import pybind11;print(pybind11.get_cmake_dir())')"
for arch in 80 90; do
  B=/tmp/small_$arch
  ( cmake -S . -B $B -GNinja -DCMAKE_BUILD_TYPE=Release -DFLASHSDPA_CUDA=ON -DFLASHSDPA_ARCHS=$arch \
      -DFLASHSDPA_DTYPES="bf16;fp16" -DFLASHSDPA_HEAD_DIMS="${HDIMS:-64;96;128;256}" \
      -DPython_EXECUTABLE="$(which python3)" -Dpybind11_DIR="$pyb" -DFLASHSDPA_OUTPUT_DIR=$B/out \
      > "$OUT/build_small_$arch.log" 2>&1 && cmake --build $B --target _C -j 8 >> "$OUT/build_small_$arch.log" 2>&1 \
    || echo "BUILD FAILED: sm_$arch" ) &
done
wait
for arch in 80 90; do
  for cap in 166912 101376; do
    echo "=== build sm_$arch, shared memory capped at $cap bytes"
    FLASHSDPA_MAX_SMEM_PER_BLOCK=$cap FLASHSDPA_C_DIR=/tmp/small_$arch/out timeout 200 \
      python3 scripts/dev/bwd_check.py --check > "$OUT/small_${arch}_$cap.log" 2>&1
    echo "rc=$? $(grep -E '^checks:' "$OUT/small_${arch}_$cap.log")"
    grep -E "^FAIL" "$OUT/small_${arch}_$cap.log" | cut -c1-200 | sort | uniq -c | sort -rn | head -8
  done
done
