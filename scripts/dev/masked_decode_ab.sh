#!/usr/bin/env bash
# masked_decode_ab.sh: session 13's sixth device call: is the masked decode row of `bench --masks`
# (key padding, B 8 x 8k, H 32, one query row) slower at HEAD than at session 12's a9a2e69 (265
# against 219 us, cuDNN 254 both times)? Builds both trees (narrow: bf16, d128) and runs the masks
# part of each twice, alternating, on one machine. Needs the old tree exported first:
#   mkdir -p .branches/old && git archive a9a2e69 | tar -x -C .branches/old
#   run(command="bash scripts/dev/masked_decode_ab.sh", carry=[".whl"], timeout_s=400)  (.branches travels: untracked)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
build() {  # build TREE DIR: the narrow in-place build of one tree
  (cd "$1" && FLASHSDPA_BUILD_DIR="$2" FLASHSDPA_DTYPES=bf16 FLASHSDPA_HEAD_DIMS=128 FLASHSDPA_ARCHS=90 \
    FLASHSDPA_BUILD_JOBS="$(nproc)" timeout 150 $PY setup.py build_ext --inplace > "$OUT/build_$(basename "$1").log" 2>&1)
}
build .branches/old /tmp/build_old & build . /tmp/build_new & wait
step build "old rc=$? logs build_old.log / build_main.log"
for round in 1 2; do
  for tree in .branches/old .; do
    name=$([[ $tree == . ]] && echo new || echo old)
    PYTHONPATH="$PWD/$tree/python${PYTHONPATH:+:$PYTHONPATH}" timeout 90 $PY -m flashsdpa bench --masks \
      --out "$OUT/masks_${name}_$round" > "$OUT/masks_${name}_$round.log" 2>&1
    step "masks $name round $round" "$(grep -A2 'decode key padding' "$OUT/masks_${name}_$round.log" | tail -1)"
  done
done
finish
