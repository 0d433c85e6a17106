#!/usr/bin/env bash
# fwd_order_dims_ab.sh (session 19, prepared; for the next session): the causal forward's dynamic
# order at every length for d64 (192-row blocks) and d256, the half session 19 left unmeasured (d128
# took it: 4k 1.079, 8k 1.042, 16k 1.016, L2 hit 66 -> 91%; kernel_notes_fwd_sm90.md). Builds (bf16,
# d64 + d256): base (16 blocks, today) and all (-DFLASHSDPA_SM90_FWD_DYNAMIC_ALL=1; ptxas 13.0: 0
# spills; the default's SASS byte-identical to the suite-tested tree). The schedule tests of `all`;
# ncu's L2 hit rate, DRAM bytes and duration on causal 8k per dim; then 3 rounds alternating one
# process per build of `bwd_ab.py --forward --causal yes` (S 4k / 8k / 16k). Table last.
# Prediction: d64 1.00-1.04x at 4k-16k (192-row tiles: 22-86 blocks; session 9's 4k 1.00-1.02 on
# an older kernel), d256 0.97-1.03x (session 9's 0.90-0.93 at 8k was the static split's era; today's
# d128 result says the L2 traffic now shows). Whichever dim gains >= 1% in every cell without a
# loss takes the dynamic order at every length; the macro goes.
#   run(command="bash scripts/dev/fwd_order_dims_ab.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy base "64;256" CUDAFLAGS=
build_copy all "64;256" CUDAFLAGS=-DFLASHSDPA_SM90_FWD_DYNAMIC_ALL=1
# (static_4k_d256 asserts today's static choice at d256, which this build changes on purpose.)
PYTHONPATH="/tmp/pkg_all/python:$PWD/tests:$SITE" tests "tests all" 150 tests_all.log $PY -m pytest -q \
  -p no:cacheprovider -n 12 -k "not static_4k_d256" tests/gpu/test_fwd_schedule.py tests/gpu/test_kernels.py \
  tests/gpu/test_masks_gpu.py
METRICS=gpu__time_duration.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum
for d in 64 256; do
  for name in base all; do
    PYTHONPATH="/tmp/pkg_$name/python:$SITE" timed "ncu $name d$d" 90 ncu_${name}_$d.log ncu --clock-control none \
      --metrics $METRICS --kernel-name regex:flashsdpa_fwd_sm90_kernel --launch-skip 1 --launch-count 1 \
      $PY scripts/dev/fwd_profile.py $d 8192 1
    grep -E "gpu__time|hit_rate|dram__bytes" "$OUT/ncu_${name}_$d.log"
  done
done
ab_rounds "base all" 80 --forward --causal yes --dims 64 256 --seqlens 4096 8192 16384
finish
