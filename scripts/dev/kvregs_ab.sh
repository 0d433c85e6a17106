#!/usr/bin/env bash
# One device call (~4 minutes) for next/bwd64-kvregs (issue 13, the d64 backward: K and V as the
# register A operands of S^T and dP^T; prediction in docs/kernel_notes_bwd_sm90.md, "K and V in
# registers at d64"). The dev binaries are built here beforehand into .devbin/ (untracked, travels):
#   bash scripts/dev/build_bwd_check_sm90.sh .devbin/bwd_check_sm90 "-DFLASHSDPA_SM90_BWD_KV_REGS=0"
#   bash scripts/dev/build_bwd_check_sm90.sh .devbin/bwd_check_sm90_kvregs
# Checks first (against the portable backward; deterministic mode), then 3 interleaved rounds of
# bench 64 (and bench 128 once each: its SASS is unchanged), the small shapes, then racecheck /
# synccheck. Merge only if the checks pass and the rounds beat the baseline.
set -u
B=${B:-.devbin}
rc=0
echo "== checks (sm90 against the portable backward)"
for d in 64 128; do timeout 60 $B/bwd_check_sm90_kvregs check $d | grep -v '^ok' | sed "s/^/kvregs d$d /"; [[ ${PIPESTATUS[0]} == 0 ]] || rc=1; done
timeout 60 $B/bwd_check_sm90_kvregs mods | tail -1 | sed "s/^/kvregs /"
timeout 100 $B/bwd_check_sm90_kvregs det 64 | sed "s/^/kvregs d64 /"
echo "== 3 interleaved rounds (whole backward), then the small shapes (us per call)"
for r in 1 2 3; do for v in "" _kvregs; do
  timeout 60 $B/bwd_check_sm90$v bench 64 | grep sm90 | sed "s/^/v$v /"
done; done | sort -s -k1,1
for v in "" _kvregs; do timeout 60 $B/bwd_check_sm90$v bench 128 | grep sm90 | sed "s/^/v$v /"; done
for r in 1 2; do for v in "" _kvregs; do timeout 60 $B/bwd_check_sm90$v small 64 | sed "s/^/v$v /"; done; done | sort -s -k1,1
timeout 90 compute-sanitizer --tool racecheck $B/bwd_check_sm90_kvregs check 64 | grep -E "SUMMARY"
timeout 90 compute-sanitizer --tool synccheck $B/bwd_check_sm90_kvregs check 64 | grep -E "SUMMARY"
exit $rc
