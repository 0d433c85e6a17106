#!/usr/bin/env bash
# session26_first.sh (prepared in session 25, not yet run): what session 25's device time did not
# reach. A bf16 + fp16 d32 / d64 / d128 build; scripts/dev/small_step_kernels.py (issue 9's
# attention-only step kernel by kernel: ours, FA2, cuDNN, default; then ours on the forced portable
# family); the quick bench's D 128 2k cell with the overhead part (its new attention-step bar) and the
# decode rows (the new paged / contiguous cache rows: issue 11's page-64 bar); and
# initcheck on the decode and features subsets and on test_kernels' (gpu_check's count with the TMA
# blind spot apart), with FLASHSDPA_SANITIZER_MARKS=1: our launchers mark the TMA-written words for
# initcheck (session 25, not yet run): the "[bulk-written]" count should read 0.
#   run(command="bash scripts/dev/session26_first.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
narrow_build 150 "32;64;128"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
timed "small step kernels" 90 small_step.log $PY scripts/dev/small_step_kernels.py
FLASHSDPA_FAMILY=sm80 timed "small step kernels (sm80)" 60 small_step_sm80.log $PY scripts/dev/small_step_kernels.py --only-ours
cat "$OUT/small_step.log" "$OUT/small_step_sm80.log" | grep -vE "^\s*$" | head -60
timed "quick bench" 200 bench.log $PY -m flashsdpa bench --sweep --decode --quick --head-dims 128 --seqlens 2k --causal false \
  --no-memory --no-plot --rounds 2 --out /tmp/bench_out
grep -E "attention step|overhead|shim|paged|decode" "$OUT/bench.log" | head -30
run_initcheck decode_features 150 tests/gpu/test_kvcache.py tests/gpu/test_features_gpu.py
run_initcheck kernels 120 tests/gpu/test_kernels.py
finish
