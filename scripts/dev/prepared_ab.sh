#!/usr/bin/env bash
# Two device calls (`prepared_ab.sh bwd`, then `prepared_ab.sh fwd`; ~4-5 minutes each, both under
# the 600 s a call may take) for the branches session 7 prepared without a GPU (list and
# predictions: docs/kernel_notes_bwd_sm90.md, "Prepared for the next device session"). The dev
# binaries are built here beforehand into .devbin/ (carry it), one per branch:
#   bwd_check_sm90 (main), _fma (next/bwd-exp-fma), _fs (next/bwd-first-store; argv[3] "nofs"
#   runs it with the old zeroing), _d64k (next/bwd-d64-dq-by-keys), fwd_check_sm90 (main), _l2
#   (next/fwd-l2-groups), _mfe (next/fwd-mods-fma-exp), _varlen
#   (next/fwd-varlen-sm90), e.g. `git worktree add /tmp/wt next/bwd-exp-fma && (cd /tmp/wt &&
#   bash scripts/dev/build_bwd_check_sm90.sh /work/main/.devbin/bwd_check_sm90_fma)`.
# Checks first (each branch against the portable kernels / the reference), then interleaved
# rounds against main, then compute-sanitizer on the new code paths. A branch merges only if its
# checks pass and its rounds beat main's.
set -u
B=.devbin
part=${1:-bwd}
if [[ "$part" == bwd ]]; then
echo "== bwd checks (sm90 against the portable backward)"
for v in _fma _fs _d64k; do
  for d in 128 64; do timeout 60 $B/bwd_check_sm90$v check $d | grep -v '^ok' | sed "s/^/$v d$d /"; done
  timeout 60 $B/bwd_check_sm90$v mods | tail -1 | sed "s/^/$v /"
done
timeout 100 $B/bwd_check_sm90_fs det 128 | sed "s/^/_fs d128 /"
timeout 100 $B/bwd_check_sm90_fs det 64 | sed "s/^/_fs d64 /"
timeout 100 $B/bwd_check_sm90_d64k det 64 | sed "s/^/_d64k d64 /"
echo "== bwd fixed passes: first store / zeroing"
timeout 60 $B/bwd_check_sm90_fs parts 128
timeout 60 $B/bwd_check_sm90_fs parts 128 nofs
echo "== bwd: 3 interleaved rounds (TFLOP/s, whole backward)"
for r in 1 2 3; do for v in "" _fma _fs _d64k; do for d in 128 64; do
  timeout 60 $B/bwd_check_sm90$v bench $d | grep sm90 | sed "s/^/v$v /"
done; done; done | sort -s -k1,1 | awk -F, '{print $1","$4","$5","$6","$7","$9}'
for r in 1 2; do for v in "" _fs; do timeout 60 $B/bwd_check_sm90$v small 64 | sed "s/^/v$v /"; done; done | sort -s -k1,1
timeout 120 compute-sanitizer --tool memcheck $B/bwd_check_sm90_fs check 128 | grep -E "SUMMARY"
timeout 120 compute-sanitizer --tool racecheck $B/bwd_check_sm90_fs check 64 | grep -E "SUMMARY"
timeout 120 compute-sanitizer --tool synccheck $B/bwd_check_sm90_fs check 128 | grep -E "SUMMARY"
timeout 120 compute-sanitizer --tool racecheck $B/bwd_check_sm90_d64k check 64 | grep -E "SUMMARY"
fi
if [[ "$part" == fwd ]]; then
echo "== fwd checks (the varlen cases now on sm90)"
timeout 120 $B/fwd_check_sm90_varlen check | tail -4
timeout 120 $B/fwd_check_sm90_l2 check | tail -2
timeout 120 $B/fwd_check_sm90_mfe mods | tail -3
echo "== fwd: 3 interleaved rounds, bench_sm90_quick"
for r in 1 2 3; do for v in "" _l2; do
  timeout 120 $B/fwd_check_sm90$v bench_sm90_quick | grep "^bench,bshd:sm90," | sed "s/^/v$v /"
done; done | sort -s -k1,1
timeout 150 compute-sanitizer --tool memcheck $B/fwd_check_sm90_varlen small | grep -E "SUMMARY"
fi
