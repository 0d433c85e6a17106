set -u
B=.devbin
for v in "" _red; do echo "== variant '$v'"; timeout 100 $B/bwd_check_sm90$v check | grep -v "^ok"; done
for r in 1 2; do for v in "" _red; do timeout 60 $B/bwd_check_sm90$v bench | grep sm90 | sed "s/^/v$v /"; done; done
timeout 100 compute-sanitizer --tool racecheck $B/bwd_check_sm90 check 2>&1 | grep -E "SUMMARY|failed"
timeout 120 ncu --clock-control none -k regex:bwd_sm90 -c 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy $B/bwd_check_sm90 prof 2>&1 | grep -vE "^==PROF==|^\s*$" | cut -c1-120 | head -120
