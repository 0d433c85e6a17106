#!/usr/bin/env bash
# make_whl.sh: the pure-Python test wheels the device scripts carry in .whl/ (ignored by git, so a
# new checkout lacks it; the device has no network): expecttest, from this machine's package index.
# Device calls then pass carry=[".whl"] (scripts/device_env.sh installs them into /tmp/site).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl
python3 -m pip download -q --no-deps -d .whl expecttest
ls .whl
