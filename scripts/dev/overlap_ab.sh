#!/usr/bin/env bash
# One device call (~5 minutes) for next/bwd64-overlap (the d64 backward: step i's dQ GEMM and its
# retirement moved behind step i + 1's S^T / dP^T issue, no wgmma_wait<0> per step; prediction in
# docs/kernel_notes_bwd_sm90.md, "Step overlap at d64"). The dev binaries are built here beforehand
# into .devbin/ (untracked, travels):
#   bash scripts/dev/build_bwd_check_sm90.sh .devbin/bwd_check_sm90 "-DFLASHSDPA_SM90_BWD_OVERLAP=0"
#   bash scripts/dev/build_bwd_check_sm90.sh .devbin/bwd_check_sm90_overlap
#   bash scripts/dev/build_bwd_check_sm90.sh .devbin/bwd_check_sm90_overlap_s "-DFLASHSDPA_SM90_BWD_OVERLAP_DP=0"
# (_overlap_s: only S^T issued before the retire, dP^T after it; optional, skipped if not built.)
# Checks first (against the portable backward; deterministic mode), then 3 interleaved rounds of
# bench 64 (and bench 128 once each: its SASS is unchanged), the small shapes, then racecheck /
# synccheck. Merge only if the checks pass and the rounds beat the baseline. Exit 1 if a check fails.
set -u
B=${B:-.devbin}
rc=0
V=(_overlap)
[[ -x $B/bwd_check_sm90_overlap_s ]] && V+=(_overlap_s)
echo "== checks (sm90 against the portable backward)"
for v in "${V[@]}"; do
  for d in 64 128; do timeout 60 $B/bwd_check_sm90$v check $d | grep -v '^ok' | sed "s/^/v$v d$d /"; [[ ${PIPESTATUS[0]} == 0 ]] || rc=1; done
done
timeout 60 $B/bwd_check_sm90_overlap mods | tail -1 | sed "s/^/v_overlap /"; [[ ${PIPESTATUS[0]} == 0 ]] || rc=1
timeout 100 $B/bwd_check_sm90_overlap det 64 | sed "s/^/v_overlap d64 /"; [[ ${PIPESTATUS[0]} == 0 ]] || rc=1
echo "== 3 interleaved rounds (whole backward), then the small shapes (us per call)"
for r in 1 2 3; do for v in "" "${V[@]}"; do
  timeout 60 $B/bwd_check_sm90$v bench 64 | grep sm90 | sed "s/^/v$v /"
done; done | sort -s -k1,1
for v in "" _overlap; do timeout 60 $B/bwd_check_sm90$v bench 128 | grep sm90 | sed "s/^/v$v /"; done
for r in 1 2; do for v in "" _overlap; do timeout 60 $B/bwd_check_sm90$v small 64 | sed "s/^/v$v /"; done; done | sort -s -k1,1
timeout 90 compute-sanitizer --tool racecheck $B/bwd_check_sm90_overlap check 64 | grep -E "SUMMARY"
timeout 90 compute-sanitizer --tool synccheck $B/bwd_check_sm90_overlap check 64 | grep -E "SUMMARY"
echo "rc=$rc"
exit $rc
