# device_env.sh: what every device script sets up first (source it from the repo root): $OUT (the
# device tool brings back what lands there), unbuffered Python, the pure-Python test wheels carried
# in .whl/ (expecttest: the device has no network), and the step table each script prints last.
OUT="${OUT:-/tmp/flashsdpa_out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=python3
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
elif ! $PY -c "import expecttest" 2>/dev/null; then
  # (session 31: a new checkout had no .whl/, and the suite's expecttest files failed to import)
  echo "device_env.sh: no .whl/ and no expecttest here: the tests that pin messages will not import;" \
    "make it on the dev machine with: bash scripts/dev/make_whl.sh" >&2
fi
# The Python path the dev scripts put behind a build copy's (/tmp/pkg_NAME/python).
SITE="${PYTHONPATH:-}"
summary=()
failed=()
# step NAME TEXT: a row of the table; check NAME RC: record a failed step (the exit code says so).
# Each step's row also goes to $OUT/summary.txt as it happens: a call the device tool's limit ends
# keeps the rows so far (session 18 lost the SASS gate's and the suites' rows that way).
step() {
  summary+=("$(printf '%-28s %s' "$1" "$2")")
  printf '%-28s %s\n' "$1" "$2" >> "$OUT/summary.txt"
}
check() { [[ "$2" == 0 ]] || failed+=("$1 (rc=$2)"); }
# pack_out: the device tool brings back at most 8 files from $OUT (16 MiB each); with more, every
# file goes into one $OUT/out.tgz (session 17 lost three logs to the count; `pack_out 1` packs
# whenever there are two or more). Unpack it here with
# `tar xzf /work/.device/N/out.tgz -C DIR`.
pack_out() {
  local n limit=${1:-8}
  n=$(find "$OUT" -type f | wc -l)
  if ((n > limit)); then
    (cd "$OUT" && tar czf /tmp/flashsdpa_out.tgz --exclude=out.tgz . && find . -type f -delete && mv /tmp/flashsdpa_out.tgz out.tgz)
    echo "(\$OUT held $n files: packed into out.tgz)"
  fi
}
# A call the device tool's limit ends (SIGTERM) still packs $OUT and prints the table: session 26's
# fifth call lost 4 of its 12 files that way (more than 8 files come back only as out.tgz, which
# finish makes). The running step's child dies with the signal; the trap runs when it has.
trap 'echo "(terminated: packing \$OUT)"; pack_out; printf "%s\n" "${summary[@]}"; exit 124' TERM
# finish: pack $OUT if needed, print the table and exit 1 if any step failed, else 0.
finish() {
  pack_out
  echo "================ summary ================"
  printf '%s\n' "${summary[@]}"
  if ((${#failed[@]})); then echo "FAILED: ${failed[*]}"; exit 1; fi
  echo "all steps passed"
  exit 0
}
# narrow_build LIMIT HEAD_DIMS: the dev scripts' in-place build (bf16 + fp16, the given head dims,
# sm_90 SASS: the portable family and the sm90 family), ptxas -v into build.log and the spilling
# kernels into spills.txt; its row in the table; on failure the table is printed and the script exits.
narrow_build() {
  local limit=$1 dims=$2 t0=$(date +%s)
  FLASHSDPA_BUILD_DIR=/tmp/narrow_build FLASHSDPA_DTYPES="bf16;fp16" FLASHSDPA_HEAD_DIMS="$dims" \
    FLASHSDPA_ARCHS=90 FLASHSDPA_BUILD_JOBS="$(nproc)" FLASHSDPA_PTXAS_VERBOSE=1 \
    timeout "$limit" $PY setup.py build_ext --inplace > "$OUT/build.log" 2>&1
  local rc=$?
  if [[ $rc != 0 ]]; then
    tail -30 "$OUT/build.log"; step build "FAILED rc=$rc (build.log)"; failed+=(build); finish
  fi
  step build "ok in $(( $(date +%s) - t0 )) s; spill warnings: $(grep -c 'bytes spill stores' "$OUT/build.log")"
  grep -E "spill stores" "$OUT/build.log" | sed -E 's/.*function .(_Z[^ ]*). ([0-9]+ bytes spill stores.*)/\2 \1/' \
    | sort -u | cut -c1-220 > "$OUT/spills.txt"
}
# validate_tree BUILD_LIMIT DIMS SUITE_LIMIT: a session's first steps on the tree as it is: the
# package built in place (narrow_build) and put first on the Python path, then the whole GPU suite
# but its slow subprocess tests (-m "not slow": minutes of torch.compile each; run them by name).
validate_tree() {
  export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
  narrow_build "$1" "$2"
  tests "gpu tests" "$3" tests.log $PY -m pytest tests/gpu -q -p no:cacheprovider -n 8 -m "not slow"
}
# build_copy NAME DIMS [VAR=VALUE ...]: a narrow build (bf16, or $BUILD_DTYPES: "bf16;fp16" for
# builds whose tests include fp16 rows; the given head dims, sm_90 SASS: both
# families) in its own build directory (fresh where the added environment differs) with the given environment added, then python/ copied
# to /tmp/pkg_NAME, so that A/B scripts run two builds side by side (PYTHONPATH=/tmp/pkg_NAME/python).
# A failed build leaves no /tmp/pkg_NAME (session 31: a tree copied from a built checkout carried
# that checkout's _C*.so, so a failed variant build still "had" a module, the other build's); a
# build directory configured from another source tree is removed first (CMake refuses it).
# Builds that run at once need a tree each (build --inplace writes python/flashsdpa/_C*.so).
build_copy() {
  local name=$1 dims=$2 t0=$(date +%s); shift 2
  take_prebuilt "$name" "$dims" "$@" && return 0
  rm -rf /tmp/pkg_$name
  if [[ -f /tmp/build_$name/CMakeCache.txt ]] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$PWD" /tmp/build_$name/CMakeCache.txt; then
    rm -rf /tmp/build_$name
  fi
  # CMake reads CUDAFLAGS (and the like) only when it creates the cache: a build directory left by an
  # earlier call on a warm machine with other VAR=VALUEs kept them (session 45: the d128 grouped
  # variant's define was dropped, so its tests ran the plain kernel). A stamp of them decides.
  if [[ -d /tmp/build_$name && "$(cat /tmp/build_$name/.flashsdpa_env 2>/dev/null)" != "$*" ]]; then
    rm -rf /tmp/build_$name
  fi
  mkdir -p /tmp/build_$name && printf '%s' "$*" > /tmp/build_$name/.flashsdpa_env
  rm -f python/flashsdpa/_C*.so
  env "$@" FLASHSDPA_BUILD_DIR=/tmp/build_$name FLASHSDPA_DTYPES="${BUILD_DTYPES:-bf16}" FLASHSDPA_HEAD_DIMS="$dims" \
    FLASHSDPA_ARCHS=90 FLASHSDPA_BUILD_JOBS="$(nproc)" FLASHSDPA_PTXAS_VERBOSE=1 \
    timeout "${BUILD_TIMEOUT:-200}" $PY setup.py build_ext --inplace > "$OUT/build_$name.log" 2>&1
  local rc=$?
  check "build $name" $rc
  [[ $rc == 0 ]] && mkdir -p /tmp/pkg_$name && cp -r python /tmp/pkg_$name/
  step "build $name" "rc=$rc in $(( $(date +%s) - t0 )) s; spill lines: $(grep -c 'bytes spill stores' "$OUT/build_$name.log")"
}
# take_prebuilt NAME DIMS [VAR=VALUE ...]: build_copy's short road (session 52): .prebuilt/NAME,
# made on the dev machine by scripts/dev/prebuild.sh with the same arguments and carried, where its
# stamp (stamp.sh: the request and the sources' hash) is this tree's and the module, its request
# and the routers' library load here (buildcheck, ctypes); else 1, and build_copy compiles.
source scripts/dev/stamp.sh
take_prebuilt() {
  local name=$1 dims=$2 dir=.prebuilt/$1 want pkg=/tmp/pkg_$1/python/flashsdpa
  shift 2
  [[ -f $dir/stamp ]] || return 1
  want=$(source_stamp "$dims" "${BUILD_DTYPES:-bf16}" "$*")
  if [[ "$(cat "$dir/stamp")" != "$want" ]]; then
    step "prebuilt $name" "stale ($(cat "$dir/stamp") against $want): compiling"
    return 1
  fi
  rm -rf /tmp/pkg_$name && mkdir -p /tmp/pkg_$name && cp -r python /tmp/pkg_$name/
  rm -f $pkg/_C*.so $pkg/libflashsdpa_routers.so
  cp $dir/libflashsdpa_routers.so $dir/_build_request.json $pkg/
  local gz
  for gz in $dir/_C*.so.gz; do gzip -dc "$gz" > "$pkg/$(basename "$gz" .gz)"; done
  if (export PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}"; $PY -m flashsdpa.buildcheck --require-cuda \
      && $PY -c "import ctypes, torch, flashsdpa; ctypes.CDLL('$pkg/libflashsdpa_routers.so')") > "$OUT/prebuilt_$name.log" 2>&1; then
    step "build $name" "prebuilt, carried ($want)"
    return 0
  fi
  { ldd --version 2>&1 | head -1; $PY --version; } >> "$OUT/prebuilt_$name.log"  # (the module needs glibc 2.34, cpython 3.12)
  tail -7 "$OUT/prebuilt_$name.log"
  step "prebuilt $name" "does not load here (prebuilt_$name.log): compiling"
  rm -rf /tmp/pkg_$name
  return 1
}
# require_copies NAME...: unless every build_copy NAME made its module, the failed builds' logs'
# tails, and finish (as on any earlier failure): the A/B and the tests need every copy.
require_copies() {
  local name
  for name in "$@"; do
    ls /tmp/pkg_$name/python/flashsdpa/_C*.so >/dev/null 2>&1 || { tail -20 "$OUT/build_$name.log"; failed+=("build $name"); }
  done
  ((${#failed[@]})) && finish
}
# dev_build NAME BINARY NVCC_ARGS...: a standalone dev harness (sm_90a, -O3, -lineinfo, the project's
# and scripts/dev's includes; NVCC_ARGS: its flags and sources), its log in $OUT/build_NAME.log, its
# row in the table; on failure the log's tail and a failed step. Returns nvcc's verdict.
dev_build() {
  local name=$1 bin=$2 t0=$(date +%s)
  shift 2
  if nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -DNDEBUG --expt-relaxed-constexpr -std=c++17 -lineinfo \
      -Ibackend/include -Icuda -Iscripts/dev -o "$bin" "$@" > "$OUT/build_$name.log" 2>&1; then
    step "build $name" "ok in $(( $(date +%s) - t0 )) s"
    return 0
  fi
  tail -20 "$OUT/build_$name.log"
  failed+=("build $name")
  return 1
}
# swap_build NAME FILE VARIANT DIMS [FILE VARIANT ...]: build_copy NAME with each VARIANT
# (scripts/dev/ab/make_variants.py writes them) in its FILE's place, the tree's files put back after.
swap_build() {
  local name=$1 dims=$4 i
  local pairs=("$2" "$3" "${@:5}")
  for ((i = 0; i < ${#pairs[@]}; i += 2)); do cp "${pairs[i]}" "/tmp/swap_keep_$i" && cp "${pairs[i + 1]}" "${pairs[i]}"; done
  build_copy "$name" "$dims"
  for ((i = 0; i < ${#pairs[@]}; i += 2)); do cp "/tmp/swap_keep_$i" "${pairs[i]}"; done
}
# timed NAME LIMIT LOG CMD...: one step under a time limit, its output in $OUT/LOG, its row (exit
# code, seconds, the log's last pass count or sanitizer summary) and its verdict.
timed() {
  local name=$1 limit=$2 log=$3; shift 3
  local t=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$log" 2>&1
  local r=$?
  step "$name" "rc=$r ($(( $(date +%s) - t )) s) $(grep -E 'ERROR SUMMARY|[0-9]+ (passed|failed|error)' "$OUT/$log" | tail -1 | cut -c1-90)"
  check "$name" "$r"
}
# tests NAME LIMIT LOG CMD...: a pytest step (timed); one that passed nothing fails too; its
# failures listed.
tests() {
  timed "$@"
  grep -qE '[0-9]+ passed' "$OUT/$3" || failed+=("$1 (none passed)")
  grep -E "^(FAILED|ERROR) " "$OUT/$3" | cut -c1-180 | head -15
}
# sanitize_subset TOOL LIMIT TESTS...: compute-sanitizer TOOL (exit code 9 on any report; racecheck
# on our kernels only, as gpu_check.sh) on the tests' sanitizer subsets, the caching allocator off,
# FLASHSDPA_UNDER_SANITIZER=1 (tests/helpers.py: a reference may take its PyTorch yardstick on the
# CPU), its log in $OUT/san_TOOL.log, its row and verdict. SAN_K: another -k expression than the
# files' sanitizer subsets (a variant's own tests).
sanitize_subset() {
  local tool=$1 limit=$2 filter=()
  shift 2
  [[ $tool == racecheck ]] && filter=(--kernel-name kns=flashsdpa)
  FLASHSDPA_UNDER_SANITIZER=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 timed "sanitizer $tool" "$limit" "san_$tool.log" compute-sanitizer --tool "$tool" \
    --error-exitcode 9 "${filter[@]}" --target-processes all $PY -m pytest "$@" -q -x -p no:cacheprovider -k "${SAN_K:-sanitizer_subset}"
}
# det_ab ROUNDS NAMES...: `bench --deterministic --rounds 1` alternating between build copies
# (build_copy's /tmp/pkg_NAME), ROUNDS process rounds, then det_ab_table.py's table (the first NAME
# the reference) into $OUT/det_ab.txt.
det_ab() {
  local rounds=$1 round name
  shift
  for round in $(seq 1 "$rounds"); do
    for name in "$@"; do
      PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "bench $name $round" 60 "bench_${name}_$round.log" \
        $PY -m flashsdpa bench --deterministic --rounds 1 --out "/tmp/b_${name}_$round"
    done
  done
  $PY scripts/dev/det_ab_table.py "$rounds" "$@" | tee "$OUT/det_ab.txt"
}
# bwd_ab_rounds ROUNDS "NAMES" ARGS...: scripts/dev/bwd_ab.py --rounds 1 --json ARGS alternating
# between build copies, ROUNDS process rounds (stopping past AB_STOP seconds, if set), each
# build's lines in $OUT/ab_NAME.jsonl; then ab_table.py's table (the first NAME the reference) into
# $OUT/ab_table.txt.
bwd_ab_rounds() {
  local rounds=$1 names=$2 round name
  shift 2
  for round in $(seq 1 "$rounds"); do
    for name in $names; do
      [[ -n ${AB_STOP:-} ]] && (( SECONDS > AB_STOP )) && break 2
      PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timeout 90 $PY scripts/dev/bwd_ab.py --rounds 1 --json "$@" \
        >> "$OUT/ab_$name.jsonl" 2>> "$OUT/ab_$name.err"
      check "A/B $name round $round" $?
    done
  done
  $PY scripts/dev/ab_table.py "$OUT" $names | tee "$OUT/ab_table.txt"
}
# paged_ab "NAMES" ROUNDS: scripts/dev/paged_probe.py (pages 16, 64, 1024) alternating between build
# copies (build_copy's /tmp/pkg_NAME), ROUNDS rounds, then each round's tables side by side.
paged_ab() {
  local names=$1 rounds=$2 round name
  for round in $(seq 1 "$rounds"); do
    for name in $names; do
      PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "probe $name $round" 40 "probe_${name}_$round.log" \
        $PY scripts/dev/paged_probe.py --pages 16 64 1024
    done
  done
  for round in $(seq 1 "$rounds"); do
    (cd "$OUT" && paste -d'|' $(for name in $names; do echo "probe_${name}_$round.log"; done))
  done
}
# ncu_kernel NAME KERNEL_REGEX LIMIT CMD...: Nsight Compute's full section set on one launch of the
# kernel (the first skipped: warm-up), clocks left alone (--clock-control none, as the device
# notes ask): $OUT/ncu_NAME_details.txt (the details page, then ncu_source_top.py's rows: where the
# warps stall, by instruction and by opcode) and ncu_NAME_source.csv.gz (the source page, SASS
# with each instruction's stall samples). ncu_compare NAMES: the lines a reader wants first.
ncu_kernel() {
  local name=$1 kname=$2 limit=$3
  shift 3
  timed "ncu $name" "$limit" "ncu_$name.log" ncu --clock-control none --set full --kernel-name "regex:$kname" \
    --launch-skip 1 --launch-count 1 -f -o "/tmp/ncu_$name" "$@"
  ncu -i "/tmp/ncu_$name.ncu-rep" --page details > "$OUT/ncu_${name}_details.txt" 2>&1
  ncu -i "/tmp/ncu_$name.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip > "$OUT/ncu_${name}_source.csv.gz"
  $PY scripts/dev/ncu_source_top.py "$OUT/ncu_${name}_source.csv.gz" --top 40 2>&1 | tee -a "$OUT/ncu_${name}_details.txt" | head -60
}
ncu_compare() {
  local name
  for name in "$@"; do
    echo "== $name"
    grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|Executed Ipc Active|No Eligible|Warp Cycles Per Issued|Achieved Occupancy|Executed Instructions  |Registers Per|Dynamic Shared Memory Per Block|Grid Size|Block Size" \
      "$OUT/ncu_${name}_details.txt" | head -20
  done
}
# splits_rounds "NAMES": 3 rounds alternating one process per build copy of
# `scripts/dev/decode_splits.py` (the heuristic's split count; B 1 x 8k, 1 x 128k, 32 x 4k, graph us
# a call beside cuDNN), each into $OUT/splits_NAME_ROUND.log, then each copy's rows.
splits_rounds() {
  local names=$1 round name
  for round in 1 2 3; do
    for name in $names; do
      PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timed "splits $name $round" 60 "splits_${name}_$round.log" \
        $PY scripts/dev/decode_splits.py --splits 0 --cases 1x8192 1x131072 32x4096
    done
  done
  for name in $names; do echo "== $name"; grep -E "^B|heuristic|CUDNN" "$OUT"/splits_${name}_*.log; done
}
# The GPU test files that exercise the forward kernels (the sm90 tiles, their schedules, split tail,
# masks, features, dropout, extremes): what a forward-kernel variant runs before its A/B, as
# "${FWD_TESTS[@]}" (scripts used to spell the list out, each a little differently).
FWD_TESTS=(tests/gpu/test_fwd_many_tiles.py tests/gpu/test_fwd_schedule.py tests/gpu/test_split_tail.py
  tests/gpu/test_kernels.py tests/gpu/test_varlen_clamp.py tests/gpu/test_windows.py tests/gpu/test_extreme.py
  tests/gpu/test_masks_gpu.py tests/gpu/test_features_gpu.py tests/gpu/test_dropout_gpu.py)
# ab_rounds "NAMES" LIMIT ARGS...: 3 rounds alternating one process per build copy (build_copy's
# /tmp/pkg_NAME) of `scripts/dev/bwd_ab.py --rounds 1 --json ARGS`, each under LIMIT seconds, its
# JSON lines into $OUT/ab_NAME.jsonl; no new process once the call is 550 s old (the device tool
# ends it at 600); then ab_table.py's table of the medians. AB_ENV_NAME="VAR=value ..." sets a copy's
# own environment (two names for one build copy, a runtime switch apart: cp -r /tmp/pkg_A /tmp/pkg_B).
ab_rounds() {
  local names=$1 limit=$2 round name var
  shift 2
  for round in 0 1 2; do
    for name in $names; do
      (( SECONDS > ${AB_STOP:-550} )) && break 2
      var="AB_ENV_$name"
      env ${!var:-} PYTHONPATH="/tmp/pkg_$name/python${SITE:+:$SITE}" timeout "$limit" $PY scripts/dev/bwd_ab.py --rounds 1 --json "$@" \
        >> "$OUT/ab_$name.jsonl" 2>> "$OUT/ab_$name.err"
      check "A/B $name round $round" $?
    done
  done
  echo "A/B ended at $SECONDS s"
  $PY scripts/dev/ab_table.py "$OUT" $names
}

# initcheck_ours LOG: our kernels' initcheck reports, "count frame" lines (most first). A report is
# ours when its first device frame in namespace flashsdpa is on its "at" line or on a "Device
# Frame" line below it (an inlined intrinsic's "at" line names the intrinsic: session 25's
# "at __ldcg(const float2 *)" inside our dQ postprocess, which a count of "at .*flashsdpa" lines
# missed). Frames with the TMA blind spot below get the suffix " [bulk-written]".
# The blind spot (session 25, scripts/dev/initcheck_bulk_probe.cu on the H200, compute-sanitizer
# 2025.3.1): initcheck does not record writes made by the TMA unit (cp.async.bulk shared -> global:
# a buffer written that way and read back, right values, got a report per word, as an unwritten
# one does). Two reads of ours see only such words: the dQ postprocess's dq_accum (bwd_prepost.cuh's
# __ldcg: the sm90 backward's bulk_store / bulk_reduce_add_f32) and the preprocess's O
# (bwd_prepost.cuh's `out` load: the sm90 forward's TMA store). What initcheck would catch there
# is checked by the GPU tests instead: test_bwd_poisoned_workspace (every dq_accum byte 0xFF before
# the launch) and the forwards into NaN-filled outputs (bitwise equal or an element was missed).
# With FLASHSDPA_SANITIZER_MARKS=1 (and compute-sanitizer --nvtx yes) the launchers mark those
# words initialized after the kernels that write them (cuda/common/sanitizer_marks.cuh). Session 26
# (H200): test_kernels.py's subset then reads 0 reports (19,999 without the marks), the decode and
# features subsets 0 of ours; so a "[bulk-written]" report now fails the step (the marks broke).
# Not ours, and not counted: the 1,792 reports of test_kvcache.py's reference (_pt), torch's mul
# kernel reading a bf16 matmul's result, which cuBLAS's sm90 kernels store by TMA: the same blind spot.
INITCHECK_BULK_WRITTEN='flashsdpa_bwd_dq_postprocess_kernel<.*bwd_prepost.cuh:238$|flashsdpa_bwd_preprocess_kernel<.*bwd_prepost.cuh:109$'
initcheck_ours() {
  awk '/^=+ [A-Z][a-z]+ .*(read|write|access) of size/ { if (frame != "") print frame; frame = ""; inrep = 1; next }
       inrep && frame == "" && /^=+ +(at|Device Frame:) .*flashsdpa::/ { sub(/^=+ +(at |Device Frame: )/, ""); frame = $0 }
       END { if (frame != "") print frame }' "$1" | sed -E 's/\+0x[0-9a-f]+//' \
    | awk -v blind="$INITCHECK_BULK_WRITTEN" '{ print ($0 ~ blind) ? $0 " [bulk-written]" : $0 }' \
    | sort | uniq -c | sort -rn
}
# run_initcheck NAME LIMIT TESTS...: initcheck (TMA marks on, INITCHECK_PRINT_LIMIT reports printed,
# 20,000 by default) on the tests' sanitizer subsets, our reports grouped into
# $OUT/initcheck_ours_NAME.txt; the step fails on the tool's exit code or on any report of ours,
# the TMA-written words' included (the row counts those apart).
run_initcheck() {
  local name=$1 limit=$2 t0=$(date +%s) rc blind ours; shift 2
  FLASHSDPA_UNDER_SANITIZER=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 FLASHSDPA_SANITIZER_MARKS=1 timeout "$limit" compute-sanitizer --tool initcheck \
    --print-limit "${INITCHECK_PRINT_LIMIT:-20000}" --nvtx yes --target-processes all $PY -m pytest "$@" -q -p no:cacheprovider \
    -k sanitizer_subset > "$OUT/initcheck_$name.log" 2>&1
  rc=$?
  initcheck_ours "$OUT/initcheck_$name.log" > "$OUT/initcheck_ours_$name.txt"
  blind=$(awk '/\[bulk-written\]$/ { n += $1 } END { print n + 0 }' "$OUT/initcheck_ours_$name.txt")
  ours=$(awk '!/\[bulk-written\]$/ { n += $1 } END { print n + 0 }' "$OUT/initcheck_ours_$name.txt")
  step "initcheck $name" "rc=$rc ($(( $(date +%s) - t0 )) s) ours $ours (+$blind TMA-written) of $(grep -c Uninitialized "$OUT/initcheck_$name.log") printed; $(grep -E 'ERROR SUMMARY' "$OUT/initcheck_$name.log" | head -1 | sed 's/=* *//')"
  check "initcheck $name" "$rc"
  [[ "$ours" == 0 ]] || failed+=("initcheck $name: $ours reports in our kernels")
  [[ "$blind" == 0 ]] || failed+=("initcheck $name: $blind reports of TMA-written words (the sanitizer marks missed them)")
  cut -c1-200 "$OUT/initcheck_ours_$name.txt" | head -12
  gzip -f "$OUT/initcheck_$name.log"
}
