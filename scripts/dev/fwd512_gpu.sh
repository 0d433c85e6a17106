#!/usr/bin/env bash
# fwd512_gpu.sh: builds and runs scripts/dev/fwd512_check.cu (the head-dim-512 cluster forward,
# written in session 18 without a GPU): its checks against the float32 reference (9 cases), memcheck
# and racecheck on the first five, then its timing on the standard sweep's shape (B*S = 16k,
# H*D = 2048: H 4). Nothing of the package is built.
#   run(command="bash scripts/dev/fwd512_gpu.sh", timeout_s=300)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
mkdir -p .devbin
timed "build" 120 build.log nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
  -Xptxas -v -I backend/include -I cuda scripts/dev/fwd512_check.cu -o .devbin/fwd512_check
timed "check" 120 check.log .devbin/fwd512_check check
cat "$OUT/check.log"
for tool in memcheck racecheck; do
  timed "$tool" 120 $tool.log compute-sanitizer --tool $tool --error-exitcode 1 .devbin/fwd512_check small
  grep -E "SUMMARY|ok|FAIL" "$OUT/$tool.log" | tail -3
done
timed "bench" 60 bench.log .devbin/fwd512_check bench
cat "$OUT/bench.log"
finish
