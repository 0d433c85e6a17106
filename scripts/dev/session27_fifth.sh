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
sanitize_subset racecheck 150 tests/gpu/test_kernels.py
grep -E "Internal|RACECHECK SUMMARY|passed|failed" "$OUT/san_racecheck.log" | head -5
export PYTHONPATH="$SITE"
rm -rf /tmp/pkg_T && mkdir -p /tmp/pkg_T && cp -r python /tmp/pkg_T/
$PY scripts/dev/ab/make_variants.py
swap_build V cuda/sm80/decode_kernel_sm80.cuh /tmp/variants/decode_kernel_v3.cuh "128"
paged_ab "T V" 2
finish
