#!/usr/bin/env bash
# combine_ab.sh (prepared in session 17 without device time; for the next session): the split
# combine with one CTA per row (-DFLASHSDPA_COMBINE_ROW_CTA=1: a row's partials loaded in one batch,
# the LSEs' loads overlapping them) against today's four rows per CTA (8 splits per batch, 5
# dependent L2 round trips at 33 splits). Two narrow builds (bf16, d128 + d256 for the Dv > 128
# column loop); the variant's decode tests (kvcache, masked decode, generation, the fuzz test's
# decode rows), memcheck / racecheck of a forced-split decode; then 3 rounds alternating one
# process per build of decode_splits.py (graph us: the heuristic, 16, 33 and 128 splits) for
# B 1 x 8k, B 1 x 128k and B 32 x 4k. Prediction: kernel_notes_decode.md. Short table last.
#   run(command="bash scripts/dev/combine_ab.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build_copy base "128;256" CUDAFLAGS=
build_copy row "128;256" CUDAFLAGS=-DFLASHSDPA_COMBINE_ROW_CTA=1
SITE="${PYTHONPATH:-}"
export PYTHONPATH="/tmp/pkg_row/python:$PWD/tests:$SITE"
tests "tests row" 240 tests_row.log $PY -m pytest -q -p no:cacheprovider -n 12 \
  tests/gpu/test_kvcache.py tests/gpu/test_masked_decode_gpu.py tests/gpu/test_generation.py tests/gpu/test_fuzz_gpu.py
cat > /tmp/decode_small.py <<'PYEOF'
import torch, flashsdpa
for d, splits in ((128, 3), (128, 128), (256, 7)):
    q = torch.randn(2, 1, 8, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(2, 1000, 2, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    lens = torch.tensor([1000, 333], device="cuda", dtype=torch.int32)
    out = flashsdpa.attention_with_kvcache(q, k, v, cache_seqlens=lens, num_splits=splits)
torch.cuda.synchronize(); print("ok", float(out.float().abs().sum()))
PYEOF
for tool in memcheck racecheck; do
  timed "$tool row" 90 $tool.log compute-sanitizer --tool $tool --kernel-name kns=flashsdpa --error-exitcode 1 \
    $PY /tmp/decode_small.py
done
for round in 0 1 2; do
  for name in base row; do
    echo "== $name round $round" >> "$OUT/ab.log"
    PYTHONPATH="/tmp/pkg_$name/python:$SITE" timeout 100 $PY scripts/dev/decode_splits.py --splits 0 16 33 128 \
      >> "$OUT/ab.log" 2>&1
    check "A/B $name round $round" $?
  done
done
$PY - "$OUT/ab.log" <<'PYEOF'
import re, statistics, sys
cur, case, got = None, None, {}
for line in open(sys.argv[1]):
    if line.startswith("== "):
        cur = line.split()[1]
    elif line.startswith("B "):
        case = line.split(" keys")[0]
    elif cur and case and line.strip().startswith(("flashsdpa", "torch")):
        parts = line.split()
        label = " ".join(parts[:-3]) if parts[-1] == "TB/s" else " ".join(parts[:-1])
        try:
            got.setdefault((case, label, cur), []).append(float(parts[-3]))
        except ValueError:
            pass
print(f"{'case':18s} {'variant':28s} {'base us':>8s} {'row us':>8s} {'row/base':>8s}")
for (case, label, name), v in sorted(got.items()):
    if name != "base":
        continue
    r = got.get((case, label, "row"), [])
    if r:
        print(f"{case:18s} {label:28s} {statistics.median(v):8.1f} {statistics.median(r):8.1f} "
              f"{statistics.median(r) / statistics.median(v):8.3f}")
PYEOF
finish
