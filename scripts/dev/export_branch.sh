#!/usr/bin/env bash
# export_branch.sh NAME [WORKTREE]: puts branch next/NAME's tree into .branches/NAME/ of this
# checkout, untracked and not ignored, so a device call carries it (the device copies only this
# checkout's working tree), plus, from its worktree if given, the prebuilt dev binaries in .devbin/
# (not ignored either). .whl/ is ignored wherever it lies, so the device command copies the carried
# one in:
#   run(command="cp -r .whl .branches/mask-skip/ && cd .branches/mask-skip && bash scripts/dev/verify_mask_skip.sh",
#       carry=[".whl"])
# Remove the export (`rm -rf .branches`) once measured: it shows in `git status` until then, and
# `git add -A` would commit it (tests/test_layout.py fails if it is tracked): add paths by name.
set -euo pipefail
cd "$(dirname "$0")/../.."
name="$1"; wt="${2:-}"
rm -rf ".branches/$name" && mkdir -p ".branches/$name"
git archive "next/$name" | tar -x -C ".branches/$name"
[[ -n "$wt" && -d "$wt/.devbin" ]] && cp -r "$wt/.devbin" ".branches/$name/"
echo "exported next/$name ($(git rev-parse --short "next/$name")) to .branches/$name ($(du -sh ".branches/$name" | cut -f1))"
