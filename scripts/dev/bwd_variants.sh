#!/usr/bin/env bash
# bwd_variants.sh: A/B of backward-kernel variants in one device call. Each variant is a set of
# -D flags (temporary #ifndef knobs put into the kernel for the experiment); all are built
# in parallel (bf16, sm_90, head dims 64 and 128), then each runs bwd_check.py --bench --quick in
# its own process (PyTorch flash re-measured alongside, so ratios are same-process).
#   VARIANTS="base=;alt=-DMY_KNOB=1" CHECK=alt bash scripts/dev/bwd_variants.sh
# CHECK names variants that also run the correctness checks and the gradient-accuracy comparison
# with PyTorch flash (--check --quick --accuracy). BENCH_LAYOUT=bshd times (B, S, H, D) memory, what
# `python -m flashsdpa bench` times by default and FA2's native layout (FA2 is 1-7% faster there).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/bwd_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
IFS=';' read -ra VARS <<< "${VARIANTS:-base=}"
jobs_each=$(( $(nproc) / ${#VARS[@]} )); (( jobs_each < 2 )) && jobs_each=2
pyb="$(python3 -c 'import pybind11;print(pybind11.get_cmake_dir())')"
t0=$(date +%s)
for v in "${VARS[@]}"; do
  name="${v%%=*}"; flags="${v#*=}"; B=/tmp/bv_$name
  ( cmake -S . -B $B -GNinja -DCMAKE_BUILD_TYPE=Release -DFLASHSDPA_CUDA=ON -DFLASHSDPA_ARCHS="${ARCHS:-90}" \
      -DFLASHSDPA_DTYPES="${DTYPES:-bf16}" -DFLASHSDPA_HEAD_DIMS="${HDIMS:-64;128}" -DCMAKE_CUDA_FLAGS="$flags" \
      -DPython_EXECUTABLE="$(which python3)" -Dpybind11_DIR="$pyb" -DFLASHSDPA_OUTPUT_DIR=$B/out \
      > "$OUT/build_$name.log" 2>&1 && cmake --build $B --target _C -j $jobs_each >> "$OUT/build_$name.log" 2>&1 \
    || echo "BUILD FAILED: $name" ) &
done
wait
echo "builds done in $(( $(date +%s) - t0 )) s"
for v in "${VARS[@]}"; do
  name="${v%%=*}"; echo "=== variant $name: ${v#*=}"
  [[ -d /tmp/bv_$name/out ]] || { tail -5 "$OUT/build_$name.log"; continue; }
  what="--bench"; [[ ",${CHECK:-}," == *",$name,"* ]] && what="--bench --check --accuracy"
  FLASHSDPA_C_DIR=/tmp/bv_$name/out timeout "${VARIANT_TIMEOUT:-150}" python3 scripts/dev/bwd_check.py $what --quick \
    > "$OUT/variant_$name.log" 2>&1
  echo "rc=$? $(grep -E '^checks:' "$OUT/variant_$name.log")"
  sed -n '/^   d causal/,$p' "$OUT/variant_$name.log"
done
