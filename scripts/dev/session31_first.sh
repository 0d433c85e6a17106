#!/usr/bin/env bash
# session31_first.sh: the sm90 d256 backward's first GPU run (BwdTraitsSm90::kWide, consume_wide):
# a bf16 + fp16 build of head dims 64 / 128 / 256, the d256 backward's tests and every test_kernels
# row above d128 (both families run them: FLASHSDPA_FAMILY=sm80 too), memcheck and racecheck of the
# san_wide256 case, then the benchmark's d256 backward sweep (3 rounds, cuDNN / FA2 / FA4 in the
# same process) and the same sweep's 8k rows on the portable family (the before number).
#   run(command="bash scripts/dev/session31_first.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
narrow_build 220 "64;128;256"
grep -A2 "bwd_sm90_kernel.*Li256ELi2ELNS_8ModsKindE0ELb0E" "$OUT/build.log" | grep -E "spill|registers" | head -4
tests "d256 bwd tests" 150 tests256.log $PY -m pytest tests/gpu/test_kernels.py -q -p no:cacheprovider -n 8 \
  -k "bwd256 or head_dims or value_head_dim or sanitizer"
FLASHSDPA_FAMILY=sm80 tests "d256 rows on sm80" 60 tests256_sm80.log $PY -m pytest tests/gpu/test_kernels.py -q \
  -p no:cacheprovider -n 8 -k "bwd256_gradients and gqa4"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timed "memcheck wide256" 60 san_memcheck.log compute-sanitizer --tool memcheck \
  --error-exitcode 9 $PY -m pytest tests/gpu/test_kernels.py -q -x -p no:cacheprovider -k "sanitizer_subset and wide256"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timed "racecheck wide256" 90 san_racecheck.log compute-sanitizer --tool racecheck \
  --kernel-name kns=flashsdpa --error-exitcode 9 $PY -m pytest tests/gpu/test_kernels.py -q -x -p no:cacheprovider \
  -k "sanitizer_subset and wide256"
timed "bench bwd d256" 170 bench256.log $PY -m flashsdpa bench --sweep --direction bwd --head-dims 256 \
  --rounds 3 --no-memory --no-plot --no-overhead --out "$OUT/bench256"
tail -30 "$OUT/bench256.log"
FLASHSDPA_FAMILY=sm80 timed "bench bwd d256 sm80" 60 bench256_sm80.log $PY -m flashsdpa bench --sweep \
  --direction bwd --head-dims 256 --seqlens 8k --rounds 1 --no-memory --no-plot --no-overhead --out "$OUT/bench256_sm80"
tail -12 "$OUT/bench256_sm80.log"
finish
