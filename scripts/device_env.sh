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
fi
summary=()
failed=()
# step NAME TEXT: a row of the table; check NAME RC: record a failed step (the exit code says so).
step() { summary+=("$(printf '%-28s %s' "$1" "$2")"); }
check() { [[ "$2" == 0 ]] || failed+=("$1 (rc=$2)"); }
# finish: print the table and exit 1 if any step failed, else 0.
finish() {
  echo "================ summary ================"
  printf '%s\n' "${summary[@]}"
  if ((${#failed[@]})); then echo "FAILED: ${failed[*]}"; exit 1; fi
  echo "all steps passed"
  exit 0
}
