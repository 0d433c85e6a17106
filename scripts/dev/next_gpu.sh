#!/usr/bin/env bash
# next_gpu.sh (prepared in session 17 for the next session's first device call, ~6-8 minutes): the
# three prepared measurements, each in its own process and folder, everything packed into one
# $OUT/out.tgz (tar xzf it here):
#   1. scripts/dev/bwd_ncu.sh: the backward's warp-stall samples per SASS instruction, ours and
#      cuDNN's (d128 S 8k): where our consumers wait (kernel_notes_bwd_sm90.md, "Next");
#   2. scripts/dev/fwd_ncu.sh: the same for the forward on the causal 8k cell (issue 12's 650 bar);
#   3. (session 18: combine_ab.sh, the one-round-trip split combine against the old one, in
#      main's history at ca630cd; the row combine is the only one since, so it is gone);
#   4. scripts/dev/bwd_launch_spy.py at d128 with the direct API's row: whether the 94 us copy
#      kernel of the SDPA road's step (ours and PyTorch flash's, not cuDNN's) is on our own road.
# Then, as a second call: scripts/dev/bwd64_stores_ab.sh (the d64 store changes apart).
#   run(command="bash scripts/dev/next_gpu.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
ROOT_OUT="$OUT"
# PARTS picks the measurements (session 18: the three do not fit one 600 s call; fwd_ncu reuses
# bwd_ncu's d128 build, the same flags).
for part in ${PARTS:-bwd_ncu fwd_ncu}; do
  mkdir -p "$ROOT_OUT/$part"
  t0=$(date +%s)
  arg=""
  if [[ $part == fwd_ncu && -d /tmp/pkg_ncu/python ]]; then rm -rf /tmp/pkg_fncu; cp -r /tmp/pkg_ncu /tmp/pkg_fncu; arg=nobuild; fi
  OUT="$ROOT_OUT/$part" timeout 280 bash "scripts/dev/$part.sh" $arg > "$ROOT_OUT/$part/console.log" 2>&1
  rc=$?
  step "$part" "rc=$rc ($(( $(date +%s) - t0 )) s)"
  check "$part" "$rc"
  tail -40 "$ROOT_OUT/$part/console.log"
done
OUT="$ROOT_OUT"
[[ -d /tmp/pkg_ncu/python ]] || build_copy ncu "128" CUDAFLAGS=  # (bwd_ncu.sh's d128 build)
PYTHONPATH="/tmp/pkg_ncu/python${PYTHONPATH:+:$PYTHONPATH}" timed "launch spy" 120 spy.log \
  $PY scripts/dev/bwd_launch_spy.py --dims 128
grep -E "copy|elementwise|flashsdpa_bwd|bprop" "$OUT/spy.log" | head -24
pack_out 1
finish
