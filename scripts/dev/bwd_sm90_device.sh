#!/usr/bin/env bash
# One device call for the Hopper backward's development loop: binaries built here beforehand with
# build_bwd_check_sm90.sh into .devbin/ (carried). VARIANTS names the binaries to compare
# (.devbin/bwd_check_sm90<suffix>); checks, interleaved bench rounds, then racecheck/memcheck and
# ncu on the last variant.
set -u
B=.devbin
VARIANTS=${VARIANTS:-""}
for v in $VARIANTS; do v=${v#=}; echo "== variant '$v'"; timeout 100 $B/bwd_check_sm90$v check | grep -v "^ok"; done
for r in 1 2 3; do for v in $VARIANTS; do v=${v#=}; timeout 60 $B/bwd_check_sm90$v bench | grep sm90 | sed "s/^/v$v /"; done; done | sort -k2,2 -s
last=$(echo $VARIANTS | awk '{print $NF}'); last=${last#=}
timeout 100 compute-sanitizer --tool memcheck $B/bwd_check_sm90$last check 2>&1 | grep -E "SUMMARY|failed"
timeout 100 compute-sanitizer --tool racecheck --print-limit 3 $B/bwd_check_sm90$last check 2>&1 | grep -E "SUMMARY|failed|hazard|Thread" | head -12
timeout 100 compute-sanitizer --tool synccheck $B/bwd_check_sm90$last check 2>&1 | grep -E "SUMMARY|failed"
if [[ "${NCU:-0}" == 1 ]]; then
timeout 120 ncu --clock-control none -k regex:bwd_sm90 -c 1 --section SpeedOfLight --section ComputeWorkloadAnalysis $B/bwd_check_sm90$last prof 2>&1 | grep -E "Throughput|Busy|Cycles|Ipc|pipeline" | cut -c1-110
fi
