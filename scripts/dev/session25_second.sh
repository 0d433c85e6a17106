#!/usr/bin/env bash
# session25_second.sh (session 25, second call, right after session25_first.sh on the same warm
# machine: its in-place full build is reused, rebuilt only where missing): issue 9's rows. The
# bench's model rows, 3 interleaved rounds (the small models' 8-sample rows have not run on a GPU:
# the fp32 row's 1.02 bar), scripts/dev/shim_cost.py (the tiny calls, the small models, the
# attention-only small step against FA2 and cuDNN, split into host and kernel time), and
# scripts/dev/unserved_split.py (the unserved float32 step's entry / router split).
#   run(command="bash scripts/dev/session25_second.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
if ! $PY -c "import flashsdpa._C" 2>/dev/null; then
  t0=$(date +%s)
  FLASHSDPA_DTYPES=bf16 FLASHSDPA_HEAD_DIMS="64;128" FLASHSDPA_ARCHS=90 FLASHSDPA_BUILD_JOBS="$(nproc)" \
    timeout 200 $PY setup.py build_ext --inplace > "$OUT/build.log" 2>&1
  rc=$?; step build "rc=$rc ($(( $(date +%s) - t0 )) s; narrow bf16 d64 / d128)"; check build $rc
  [[ $rc == 0 ]] || finish
fi
$PY -m flashsdpa info 2>&1 | head -12
timed "unserved split" 90 unserved_split.log $PY scripts/dev/unserved_split.py --rounds 41
tail -8 "$OUT/unserved_split.log"
timed "bench --models" 230 models.log $PY -m flashsdpa bench --models --rounds 3 --out /tmp/models_out
sed -n '/^Models/,/^  (?/p' "$OUT/models.log"
grep -E "^  models|small" "$OUT/models.log" | tail -12
timed "shim_cost" 150 shim_cost.log $PY scripts/dev/shim_cost.py --rounds 9 --calls 1000
tail -40 "$OUT/shim_cost.log"
finish
