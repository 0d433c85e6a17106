#!/usr/bin/env bash
# session27_fifth.sh: (1) racecheck of test_kernels' whole subset again (session27_second.sh's run
# stopped at san_short64 on a sanitizer-internal hardware exception inside torch's math reference;
# racecheck_probe.py alone and the subset without it were clean); (2) session 26's unmeasured
# decode variant 3 (page ids one tile ahead, shift and mask) against the tree, paged_probe.py, 2
# alternating rounds.
#   run(command="bash scripts/dev/session27_fifth.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
narrow_build 170 "64;128"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timed "racecheck subset" 150 san_racecheck.log compute-sanitizer --tool racecheck --error-exitcode 9 \
  --kernel-name kns=flashsdpa --target-processes all $PY -m pytest tests/gpu/test_kernels.py -q -x -p no:cacheprovider -k sanitizer_subset
grep -E "Internal|RACECHECK SUMMARY|passed|failed" "$OUT/san_racecheck.log" | head -5
export PYTHONPATH="$SITE"
rm -rf /tmp/pkg_T && mkdir -p /tmp/pkg_T && cp -r python /tmp/pkg_T/
$PY scripts/dev/ab/make_variants.py
cp cuda/sm80/decode_kernel_sm80.cuh /tmp/swap_keep && cp /tmp/variants/decode_kernel_v3.cuh cuda/sm80/decode_kernel_sm80.cuh \
  && build_copy V "128"; cp /tmp/swap_keep cuda/sm80/decode_kernel_sm80.cuh
for round in 1 2; do
  for name in T V; do
    PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "probe $name $round" 40 probe_${name}_$round.log $PY scripts/dev/paged_probe.py --pages 16 64 1024
  done
done
(cd "$OUT" && paste -d'|' probe_T_1.log probe_V_1.log && paste -d'|' probe_T_2.log probe_V_2.log)
finish
