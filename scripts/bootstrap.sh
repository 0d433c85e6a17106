#!/usr/bin/env bash
# bootstrap.sh: make this checkout usable: torch (a CPU build where none is installed), the build
# tools, the test tools, then `pip install -e .` of flashsdpa (building _C; with CUDA kernels when
# nvcc is on PATH). Idempotent and quiet when everything is already there.
#
#   FLASHSDPA_SKIP_INSTALL=1   only check/install dependencies
#   any FLASHSDPA_* build knob  (see setup.py) is passed through to the build; an unset knob means
#                               its default, never the value of an earlier build (setup.py clears
#                               CMake's cache of them), and the build is checked against what was
#                               asked (python -m flashsdpa.buildcheck) before bootstrap says it is done
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"

have() { "$PY" -c "import $1" >/dev/null 2>&1; }
pip_install() { "$PY" -m pip install -q --disable-pip-version-check "$@"; }

# torch: never replace an installed one (the GPU machine's CUDA build). Where none is installed,
# take the CPU build 2.13.0, which lies on this workplace's disk; a plain `pip install torch`
# would download a multi-GB CUDA build.
if ! have torch; then
  echo "bootstrap: installing torch==2.13.0 (CPU build)"
  pip_install "torch==2.13.0"
fi

missing=()
have pybind11 || missing+=("pybind11>=2.10")
have pytest || missing+=("pytest")
have expecttest || missing+=("expecttest")
have hypothesis || missing+=("hypothesis")
have mypy || missing+=("mypy")  # (tests/test_types.py)
command -v cmake >/dev/null 2>&1 || have cmake || missing+=("cmake>=3.24")
command -v ninja >/dev/null 2>&1 || have ninja || missing+=("ninja")
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}"
  pip_install "${missing[@]}"
fi

# What a build with this environment makes: said before building, and by FLASHSDPA_SKIP_INSTALL=1.
cuda="${FLASHSDPA_CUDA:-AUTO}"
if [[ "${cuda^^}" == OFF ]]; then
  plan="a CPU-only flashsdpa._C (FLASHSDPA_CUDA=OFF; calls fall back to PyTorch)"
elif command -v nvcc >/dev/null 2>&1; then
  plan="flashsdpa with CUDA kernels ($(nvcc --version | tail -1))"
elif [[ "${cuda^^}" == ON ]]; then
  plan="nothing: FLASHSDPA_CUDA=ON but no nvcc on PATH (the build will fail)"
else
  plan="a CPU-only flashsdpa._C (no nvcc; calls fall back to PyTorch)"
fi
for knob in FLASHSDPA_ARCHS FLASHSDPA_DTYPES FLASHSDPA_HEAD_DIMS; do
  [[ -n "${!knob:-}" ]] && plan+=", ${knob}=${!knob}"
done

if [[ "${FLASHSDPA_SKIP_INSTALL:-0}" == 1 ]]; then
  echo "bootstrap: FLASHSDPA_SKIP_INSTALL=1: dependencies only (a build now would make ${plan})"
else
  echo "bootstrap: building ${plan}"
  start=$(date +%s)
  mkdir -p build
  "$PY" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e . \
    > build/bootstrap-install.log 2>&1 || { cat build/bootstrap-install.log; exit 1; }
  echo "bootstrap: flashsdpa installed in $(( $(date +%s) - start )) s"
  # Say what was built, and fail when it is not what was asked (issue 10, items 3 and 4).
  "$PY" -m flashsdpa.buildcheck | sed 's/^buildcheck:/bootstrap:/'
  exit "${PIPESTATUS[0]}"
fi
