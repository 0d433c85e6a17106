#!/usr/bin/env bash
# prebuild.sh NAME DIMS [VAR=VALUE ...] (session 52): build here, for the device's Python (3.12),
# the module a device script's `build_copy NAME DIMS [VAR=VALUE ...]` would compile there (sm_90,
# $BUILD_DTYPES or bf16, the given head dims, the VAR=VALUEs in the build's environment), into
# .prebuilt/NAME/ (ignored by git; carry it: run(..., carry=[".whl", ".prebuilt"])), stamped with
# the request and a hash of the sources (stamp.sh's `source_stamp`). build_copy there takes it
# instead of compiling where the stamp matches its own and the module imports; else it builds as
# before. Why: a build on the device is 1.5-4 minutes of the session's 30 (session 52 lost its whole
# budget to refused starts; sessions 48-51 spent ~150-250 s a call on builds), and this machine has
# the same nvcc 13.0. _C has no torch dependency, so only the Python ABI (cpython-312) matters; the
# C++ routers' library targets torch 2.11's stable ABI (TORCH_TARGET_VERSION), so the one built
# against this machine's torch serves the device's 2.11 as the CPU-only CI's build serves 2.13.
# The carry limit is 64 MiB for all paths together, checked below: the module travels gzipped (a
# bf16 + fp16 d64 / d128 / d256 sm_90 one is 48 MB, 15 MB gzipped).
#   BUILD_DTYPES="bf16;fp16" bash scripts/dev/prebuild.sh full "64;128;256"
#   BUILD_DTYPES="bf16;fp16" bash scripts/dev/prebuild.sh tmaload "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_BWD_BIAS_TMA_LOAD=1
set -euo pipefail
cd "$(dirname "$0")/../.."
name=$1 dims=$2; shift 2
PY312=${PY312:-/root/.pyenv/versions/3.12.1/bin/python3.12}
[[ -x $PY312 ]] || { echo "prebuild.sh: no Python 3.12 at $PY312 (set PY312)"; exit 2; }
source scripts/dev/stamp.sh
out=$PWD/.prebuilt/$name build=/tmp/prebuild_$name
rm -rf "$out" && mkdir -p "$out"
# A fresh build tree whenever the added environment differs (CMake reads CUDAFLAGS only when it
# creates the cache: device_env.sh's build_copy says why).
[[ "$(cat "$build/.flashsdpa_env" 2>/dev/null)" == "$*" ]] || rm -rf "$build"
mkdir -p "$build" && printf '%s' "$*" > "$build/.flashsdpa_env"
t0=$(date +%s)
# The sources as the build starts (an edit during the build must not be stamped as built).
stamp=$(source_stamp "$dims" "${BUILD_DTYPES:-bf16}" "$*")
export FLASHSDPA_CUDA=ON FLASHSDPA_ARCHS=90 FLASHSDPA_DTYPES="${BUILD_DTYPES:-bf16}" FLASHSDPA_HEAD_DIMS="$dims"
# setup.py's own configure arguments for OUTPUT_DIR (python3 here imports it; its __main__ is
# guarded), with PYTHON for CMake's Python where given.
# (mapfile of a process substitution does not see its failure: a caller checks that args came.)
configure_args() {
  local python=${2:-}
  python3 -c "import sys; sys.path.insert(0, '.'); import pathlib, setup
for a in setup.configure_args(pathlib.Path('$1')):
    print('-DPython_EXECUTABLE=$python' if '$python' and a.startswith('-DPython_EXECUTABLE=') else a)"
}
python3 -c "import sys, json; sys.path.insert(0, '.'); import setup
json.dump(setup.build_request(), open('$out/_build_request.json', 'w'), indent=1)"
# _C for the device's interpreter (which has no torch here, so this tree makes no routers' library).
mapfile -t args < <(configure_args "$out" "$PY312")
(( ${#args[@]} )) || { echo "prebuild.sh: no configure arguments from setup.py"; exit 1; }
env "$@" cmake -S . -B "$build" "${args[@]}" > "$build/configure.log"
env "$@" cmake --build "$build" -j "${FLASHSDPA_BUILD_JOBS:-$(nproc)}" --target _C > "$build/build.log"
# The routers' library: one TU against this machine's torch, in a tree configured by python3.
routers=/tmp/prebuild_routers
mapfile -t args < <(configure_args "$routers/out")
(( ${#args[@]} )) || { echo "prebuild.sh: no configure arguments from setup.py"; exit 1; }
cmake -S . -B "$routers" "${args[@]}" > "$routers.configure.log"
cmake --build "$routers" --target flashsdpa_routers > "$routers.build.log"
cp "$routers/out/libflashsdpa_routers.so" "$out/"
# Compressed for the carry (gzip -1: 48 -> 15 MB for bf16 + fp16 d64 / d128 / d256, under a second;
# take_prebuilt unpacks it there in well under one).
gzip -1 "$out"/_C.cpython-312-*.so
echo "$stamp" > "$out/stamp"
size=$(cat "$out"/* | wc -c)
echo "prebuild.sh: .prebuilt/$name in $(( $(date +%s) - t0 )) s, $(( size >> 20 )) MiB ($(ls "$out" | tr '\n' ' '))"
total=$(cat .prebuilt/*/* .whl/* 2>/dev/null | wc -c)
(( total < 64 << 20 )) || echo "prebuild.sh: WARNING: .prebuilt + .whl are $(( total >> 20 )) MiB, over the carry limit (64 MiB)"
