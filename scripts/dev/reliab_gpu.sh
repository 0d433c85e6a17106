#!/usr/bin/env bash
# reliab_gpu.sh: the device run for branch reliab10 (issue 10: kernel-side varlen clamping, the
# extreme-value suite, streams / GPUs / threads, the cuDNN repeat-call crash, the reduce-overhead
# crash; issue 9's shim_cost table). One call, under 4 minutes on the H200 (narrow build ~1-2 min):
#   1. build narrow in place (fp16 + bf16, head dims 64 and 128, sm_90: both families)
#   2. the new GPU tests (the slow reduce-overhead test unless SLOW=0)
#   3. compute-sanitizer memcheck over the clamping test, caching allocator off
#   4. SHIM=1: scripts/dev/shim_cost.py (issue 9's table, ~1 min)
# Short table last; exit 1 when any step failed. Logs under $OUT.
#
#   bash scripts/dev/reliab_gpu.sh            # on the H200 (nvidia-h200-x2 runs the cuda:1 test too)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"

t0=$(date +%s)
if FLASHSDPA_BUILD_DIR="$PWD/build/reliab" FLASHSDPA_HEAD_DIMS="64;128" FLASHSDPA_DTYPES="fp16;bf16" \
   FLASHSDPA_ARCHS=90 FLASHSDPA_BUILD_JOBS="${FLASHSDPA_BUILD_JOBS:-$(nproc)}" \
   timeout 150 $PY setup.py build_ext --inplace > "$OUT/reliab_build.log" 2>&1; then
  step build "ok in $(( $(date +%s) - t0 )) s"
else
  tail -30 "$OUT/reliab_build.log"; step build "FAILED (see reliab_build.log)"; failed+=(build); finish
fi
$PY -c "import flashsdpa, torch; b = flashsdpa.build_info(); print('torch', torch.__version__, torch.cuda.get_device_name(), \
'GPUs', torch.cuda.device_count(), '| _C', b['with_cuda'], b['kernel_families'], b['dtypes'], b['head_dims'])"

# pytest TESTS... -> one row; "none passed" is a failure (a GPU run that tested nothing).
run_tests() {
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s) log="$OUT/reliab_${name// /_}.log"
  timeout "$limit" $PY -m pytest "$@" -q -p no:cacheprovider -rs > "$log" 2>&1
  local rc=$?
  tail -15 "$log"
  step "$name" "rc=$rc $(grep -E '(passed|failed|error|skipped)' "$log" | tail -1) ($(( $(date +%s) - t0 )) s)"
  check "$name" "$rc"
  grep -qE '[0-9]+ passed' "$log" || failed+=("$name (none passed)")
}

run_tests "varlen clamping" 60 tests/gpu/test_varlen_clamp.py
run_tests "extreme values" 90 tests/gpu/test_extreme.py
run_tests "streams, GPUs, threads" 60 tests/gpu/test_streams.py
if [[ "${SLOW:-1}" == 1 ]]; then
  run_tests "process crashes (+ slow)" 200 tests/gpu/test_process_crashes.py
else
  run_tests "process crashes" 60 tests/gpu/test_process_crashes.py -m "not slow"
fi

# memcheck over the clamping test: with the caching allocator off every tensor is its own
# allocation, so an access past a tensor (not only past an allocator segment) is reported.
t0=$(date +%s)
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 \
  --target-processes all $PY -m pytest tests/gpu/test_varlen_clamp.py -q -x -p no:cacheprovider \
  > "$OUT/reliab_memcheck.log" 2>&1
rc=$?
step "memcheck, varlen clamping" "rc=$rc $(grep -E 'ERROR SUMMARY' "$OUT/reliab_memcheck.log" | tail -1) ($(( $(date +%s) - t0 )) s)"
check "memcheck, varlen clamping" "$rc"
grep -E 'passed|failed' "$OUT/reliab_memcheck.log" | tail -1

if [[ "${SHIM:-0}" == 1 ]]; then
  t0=$(date +%s)
  timeout 150 $PY scripts/dev/shim_cost.py > "$OUT/shim_cost.log" 2>&1
  rc=$?
  tail -60 "$OUT/shim_cost.log"
  step "shim_cost (issue 9)" "rc=$rc ($(( $(date +%s) - t0 )) s)"
  check "shim_cost" "$rc"
fi
finish
