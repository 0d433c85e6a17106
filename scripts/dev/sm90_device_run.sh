#!/usr/bin/env bash
# One device call for the Hopper forward's development loop (binaries built here beforehand with
# build_fwd_check_sm90.sh into .devbin/, carried): the standalone checks and sweep, the sanitizers on
# the small cases, then (unless PACKAGE=0) the package build and the GPU suite via gpu_check.sh.
set -u
OUT="${OUT:-/tmp/flashsdpa_out}"; mkdir -p "$OUT"
B=.devbin
if [[ -x $B/fwd_check_old && -x $B/fwd_check_new ]]; then  # portable-kernel A/B, interleaved rounds
  for r in 1 2 3; do for v in old new; do $B/fwd_check_$v bench_quick | grep -v config | sed "s/^bench,/$v,/"; done; done > "$OUT/ab80.log"
  sort -t, -k3,3n -k5,5n -k4,4n -k1,1 "$OUT/ab80.log" | awk -F, '{print $1, "d"$3, "S"$4, "c"$5, $7}' | paste - - - - - - 
fi
if [[ -x $B/fwd_check_new ]]; then
  timeout 100 $B/fwd_check_new check > "$OUT/check80.log" 2>&1; echo "check (sm80 only) rc=$?"; grep -v "^ok" "$OUT/check80.log"
fi
timeout 150 $B/fwd_check_sm90 check > "$OUT/check.log" 2>&1; echo "check rc=$?"; grep -v "^ok" "$OUT/check.log"; grep huge "$OUT/check.log"
$B/fwd_check_sm90 bench_encode
timeout 240 $B/fwd_check_sm90 "${SWEEP:-bench_sm90}" > "$OUT/bench90.log" 2>&1; echo "sweep rc=$?"
for t in memcheck racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $t --error-exitcode 9 $B/fwd_check_sm90 small > "$OUT/$t.log" 2>&1
  echo "$t rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$t.log" | tail -1)"
done
if [[ "${PACKAGE:-1}" == 1 ]]; then
  FLASHSDPA_ARCHS="${FLASHSDPA_ARCHS:-90}" BENCH="${BENCH:-none}" TESTS_TIMEOUT="${TESTS_TIMEOUT:-300}" \
    bash scripts/gpu_check.sh 2>&1 | tail -25
fi
echo "==== sm90 sweep (TFLOP/s) ===="
python3 scripts/dev/sm90_table.py "$OUT/bench90.log"
