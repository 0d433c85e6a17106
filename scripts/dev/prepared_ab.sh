#!/usr/bin/env bash
# One device call (~2 minutes) for the branch session 8 prepared without a GPU (prediction in
# docs/kernel_notes_bwd_sm90.md, "Prepared for the next device session"). The dev binaries are
# built here beforehand into .devbin/ (carry it):
#   bwd_check_sm90 (main), bwd_check_sm90_nw (next/bwd-consumer-nowait), e.g.
#   `git worktree add /tmp/wt next/bwd-consumer-nowait && (cd /tmp/wt &&
#   bash scripts/dev/build_bwd_check_sm90.sh /work/main/.devbin/bwd_check_sm90_nw)`.
# Checks first (the branch against the portable kernels), then interleaved rounds against main,
# then compute-sanitizer on the changed kernel. The branch merges only if its checks pass and its
# rounds beat main's. (Session 8's version of this script, for session 7's seven branches, is in
# git history: outcomes in the kernel notes.)
set -u
B=.devbin
echo "== bwd checks (sm90 against the portable backward)"
for d in 128 64; do timeout 60 $B/bwd_check_sm90_nw check $d | grep -v '^ok' | sed "s/^/_nw d$d /"; done
timeout 60 $B/bwd_check_sm90_nw mods | tail -1 | sed "s/^/_nw /"
timeout 100 $B/bwd_check_sm90_nw det 128 | sed "s/^/_nw d128 /"
echo "== bwd: 3 interleaved rounds (whole backward, ms), then the small shapes (us per call)"
for r in 1 2 3; do for v in "" _nw; do for d in 128 64; do
  timeout 60 $B/bwd_check_sm90$v bench $d | grep sm90 | sed "s/^/v$v /"
done; done; done | sort -s -k1,1 | awk -F, '{print $1","$4","$5","$6","$7","$9}'
for r in 1 2 3; do for v in "" _nw; do timeout 60 $B/bwd_check_sm90$v small 64 | sed "s/^/v$v /"; done; done | sort -s -k1,1
timeout 120 compute-sanitizer --tool racecheck $B/bwd_check_sm90_nw check 128 | grep -E "SUMMARY"
timeout 120 compute-sanitizer --tool synccheck $B/bwd_check_sm90_nw check 64 | grep -E "SUMMARY"
