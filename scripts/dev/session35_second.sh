#!/usr/bin/env bash
# session35_second.sh: the sm90 forward's chained tiles (FwdTraitsSm90::kChainTiles, default on;
# kernel_notes_fwd_sm90.md, "Chained tiles") on the GPU for the first time: a bf16 + fp16 build of
# head dims 64 / 128 / 256 and the whole GPU suite on it (-m "not slow", with the new
# test_fwd_chain.py), memcheck / racecheck / synccheck on test_fwd_chain's sanitizer subset, then
# the A/B against a FLASHSDPA_SM90_FWD_CHAIN=0 build of d64 / d128: 3 alternating process rounds of
# bwd_ab.py --forward (ours and cuDNN in each process), S 512 / 1k / 2k / 8k, causal and not.
#   run(command="bash scripts/dev/session35_second.sh", carry=[".whl"], timeout_s=600)
# The variant lost (kernel_notes_fwd_sm90.md, "Chained tiles") and was removed: this script runs at
# 0fb3214, whose tree has it (the switch, tests/gpu/test_fwd_chain.py, now test_fwd_many_tiles.py).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
validate_tree 240 "64;128;256" 200
grep -A2 "fwd_sm90_kernel.*ModsKindE0ELb0E" "$OUT/build.log" | grep -E "spill|registers" | sort | uniq -c | head -4
for tool in memcheck racecheck synccheck; do sanitize_subset $tool 60 tests/gpu/test_fwd_chain.py; done
rm -rf /tmp/pkg_tree && mkdir -p /tmp/pkg_tree && cp -r python /tmp/pkg_tree/  # (build_copy removes python/'s _C)
build_copy nochain "64;128" CUDAFLAGS=-DFLASHSDPA_SM90_FWD_CHAIN=0
for round in 0 1 2; do
  for name in tree nochain; do
    (( SECONDS > 540 )) && break 2
    PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timeout 90 $PY scripts/dev/bwd_ab.py --forward --rounds 1 --json \
      --dims 128 64 --causal both --seqlens 512 1024 2048 8192 >> "$OUT/ab_$name.jsonl" 2>> "$OUT/ab_$name.err"
    check "A/B $name round $round" $?
  done
done
echo "A/B ended at $SECONDS s"
$PY scripts/dev/ab_table.py "$OUT" nochain tree | tee "$OUT/ab_table.txt"
step "A/B table" "$(wc -l < "$OUT/ab_table.txt") lines"
finish
