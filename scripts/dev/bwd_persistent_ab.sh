#!/usr/bin/env bash
# bwd_persistent_ab.sh: the persistent sm90 backward against the kernel the default build runs, on
# the H200 (bwd_persistent_gpu.sh compares it with one CTA per item inside its own build, whose
# kernel code is the persistent one either way). Two narrow builds (bf16, d64 / d128, both
# families) in fresh build directories, the default and FLASHSDPA_SM90_BWD_PERSISTENT=ON, each
# copied with its python/; then 3 rounds alternating one process per build of
# scripts/dev/bwd_persistent_ab.py --rounds 1 --json (each times its kernel and cuDNN in the same
# process); the summary is the median over rounds of pers / base, and each against its process's
# cuDNN. Short table last; exits 1 if a step failed.
#   run(command="bash scripts/dev/bwd_persistent_ab.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy base "64;128" FLASHSDPA_SM90_BWD_PERSISTENT=OFF
build_copy pers "64;128" FLASHSDPA_SM90_BWD_PERSISTENT=ON
for round in 0 1 2; do
  for name in base pers; do
    PYTHONPATH="/tmp/pkg_$name/python" timeout 150 $PY scripts/dev/bwd_persistent_ab.py --rounds 1 --json \
      >> "$OUT/ab_$name.jsonl" 2>> "$OUT/ab_$name.err"
    check "A/B $name round $round" $?
  done
done
step "A/B" "base $(wc -l < "$OUT/ab_base.jsonl") lines, pers $(wc -l < "$OUT/ab_pers.jsonl") lines"
$PY - "$OUT/ab_base.jsonl" "$OUT/ab_pers.jsonl" <<'PYEOF'
import json, statistics, sys
def load(path):
    rows = {}
    for line in open(path):
        r = json.loads(line)
        rows.setdefault(r["problem"], []).append(r)
    return rows
base, pers = load(sys.argv[1]), load(sys.argv[2])
print(f"{'problem':32s} {'base':>7s} {'pers':>7s} {'pers/base':>9s} {'base/cuDNN':>10s} {'pers/cuDNN':>10s}")
for problem, b_rows in base.items():
    p_rows = pers.get(problem, [])
    n = min(len(b_rows), len(p_rows))
    if n == 0:
        continue
    ratio = statistics.median(p_rows[i]["pers"] / b_rows[i]["base"] for i in range(n))
    b_vs = statistics.median(r["base"] / r["cudnn"] for r in b_rows[:n])
    p_vs = statistics.median(r["pers"] / r["cudnn"] for r in p_rows[:n])
    print(f"{problem:32s} {statistics.median(r['base'] for r in b_rows):7.1f} "
          f"{statistics.median(r['pers'] for r in p_rows):7.1f} {ratio:9.3f} {b_vs:10.3f} {p_vs:10.3f}")
PYEOF
finish
