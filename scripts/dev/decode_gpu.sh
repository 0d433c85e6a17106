#!/usr/bin/env bash
# decode_gpu.sh: the decode path's GPU check (issue 11) in one device call, under 4 minutes on an
# H200: a narrow build (sm80 family only, SASS for the device's arch, bf16 + fp16, head dims 64 /
# 128 / 256: the decode tests' buckets), the KV-cache GPU tests (tests/gpu/test_kvcache.py: the
# decode grid, splits, pages, append, graph replay), `python -m flashsdpa bench --decode` (same
# process as PyTorch's FA2 and cuDNN) and compute-sanitizer memcheck on the decode sanitizer
# subset. Prints a short table last; exits 1 when any step fails. Logs go to $OUT.
#
#   bash scripts/dev/decode_gpu.sh                    # on the device, in the repo root
#   TESTS_K="decode_128k" BENCH=0 bash scripts/dev/decode_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"

arch=$($PY -c 'import torch; c = torch.cuda.get_device_capability(); print(f"{c[0]}{c[1]}")' 2>/dev/null || echo 90)
t0=$(date +%s)
# The sm90 family has no decode path; leaving it out saves its wgmma TUs. One arch: the device's.
FLASHSDPA_FAMILIES=sm80 FLASHSDPA_ARCHS="$arch" FLASHSDPA_DTYPES="bf16;fp16" FLASHSDPA_HEAD_DIMS="64;128;256" \
  FLASHSDPA_BUILD_DIR="$PWD/build/decode" FLASHSDPA_BUILD_JOBS="$(nproc)" FLASHSDPA_PTXAS_VERBOSE=1 \
  timeout 200 $PY setup.py build_ext --inplace > "$OUT/build.log" 2>&1
rc=$?
if [[ $rc != 0 ]]; then
  tail -40 "$OUT/build.log"; step build "FAILED rc=$rc (see build.log)"; failed+=(build); finish
fi
spills=$(grep -A1 "Compiling entry function '.*decode_sm80" "$OUT/build.log" | grep -cE '[1-9][0-9]* bytes spill stores')
step build "ok in $(( $(date +%s) - t0 )) s (sm_$arch; decode kernels spilling: $spills)"
$PY -m flashsdpa info 2>&1 | head -20

t0=$(date +%s)
timeout "${TESTS_TIMEOUT:-150}" $PY -m pytest tests/gpu/test_kvcache.py ${TESTS_K:+-k "$TESTS_K"} -q -p no:cacheprovider \
  --durations=8 -rs 2>&1 | tee "$OUT/tests.log" | tail -30
rc=${PIPESTATUS[0]}
step "kvcache gpu tests" "rc=$rc $(grep -E '(passed|failed|error)' "$OUT/tests.log" | tail -1) ($(( $(date +%s) - t0 )) s)"
check "kvcache gpu tests" "$rc"
grep -qE '[0-9]+ passed' "$OUT/tests.log" || failed+=("kvcache gpu tests (none passed)")

if [[ "${BENCH:-1}" == 1 ]]; then
  t0=$(date +%s)
  timeout "${BENCH_TIMEOUT:-60}" $PY -m flashsdpa bench --decode --out "$OUT/bench" 2>&1 | tee "$OUT/bench.log" | tail -25
  rc=${PIPESTATUS[0]}
  step "bench --decode" "rc=$rc ($(( $(date +%s) - t0 )) s)"
  check "bench --decode" "$rc"
fi

if [[ "${SANITIZE:-1}" == 1 ]]; then
  t0=$(date +%s)
  timeout "${SANITIZE_TIMEOUT:-60}" compute-sanitizer --tool memcheck --error-exitcode 9 --target-processes all \
    $PY -m pytest tests/gpu/test_kvcache.py -q -x -p no:cacheprovider -k "sanitizer_subset" > "$OUT/sanitize_memcheck.log" 2>&1
  rc=$?
  step "memcheck" "rc=$rc $(grep -E 'ERROR SUMMARY' "$OUT/sanitize_memcheck.log" | tail -1) ($(( $(date +%s) - t0 )) s)"
  check "memcheck" "$rc"
fi

echo "================ decode bench (ours / fastest PyTorch) ================"
grep -E "^  +(B [0-9]+ x|[0-9]+ +[0-9]+ flashsdpa )" "$OUT/bench.log" 2>/dev/null | head -12
finish
