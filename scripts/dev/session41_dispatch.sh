#!/usr/bin/env bash
# session41_dispatch.sh (session 41): the first call of a session whose card is not known in advance
# (a call naming nvidia-h200 may get an H100): on an H200 the H200-set bars (h200_bars.sh), on any
# other card the HALF_FIRST A/B (session41_first.sh), so the start is never spent on a refusal.
#   run(command="bash scripts/dev/session41_dispatch.sh", carry=[".whl"], timeout_s=560, kind="nvidia-h200")
set -uo pipefail
cd "$(dirname "$0")/../.."
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash scripts/dev/h200_bars.sh
fi
exec bash scripts/dev/session41_first.sh
