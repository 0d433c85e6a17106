# buildcheck.py: does flashsdpa._C contain what its build was asked for?
#
# setup.py writes _build_request.json next to _C: every FLASHSDPA_* knob as the build saw it (the
# environment, CMakeLists.txt's default where unset) and the CUDA compiler a FLASHSDPA_CUDA=AUTO
# build would find. This module compares that with what _C reports (build_info()), so a build that
# silently lacks its kernels (no CUDA under AUTO with nvcc present, a sticky narrowed head-dim list,
# a family missing) fails CI and the CPU suite instead of skipping tests (issue 10, item 3).
#   python -m flashsdpa.buildcheck [--require-cuda]    exit 0 when _C matches, 1 otherwise
"""Compare ``flashsdpa._C``'s contents with what its build was asked for."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["REQUEST_FILE", "expected_build", "load_request", "mismatches"]

REQUEST_FILE = Path(__file__).resolve().parent / "_build_request.json"
_DTYPE_NAMES = {"fp16": "float16", "bf16": "bfloat16"}


def load_request(path: Path = REQUEST_FILE) -> dict[str, Any] | None:
    """The request setup.py recorded for the _C next to it, or None (built some other way)."""
    try:
        return dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return None


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.replace(",", ";").split(";") if item.strip()]


def expected_build(request: dict[str, Any]) -> dict[str, Any]:
    """What a build given ``request`` must contain, in build_info()'s terms."""
    cuda = str(request["FLASHSDPA_CUDA"]).upper()
    with_cuda = cuda == "ON" or (cuda == "AUTO" and bool(request.get("cuda_compiler")))
    archs = sorted({int(a.split("-")[0].rstrip("a")) for a in _items(request["FLASHSDPA_ARCHS"])})
    families = {"sm80"} | ({"sm90"} if 90 in archs else set())
    if _items(str(request.get("FLASHSDPA_FAMILIES", ""))):  # a narrowed build names its families
        families &= set(_items(str(request["FLASHSDPA_FAMILIES"])))
    return {
        "with_cuda": with_cuda,
        "archs": archs if with_cuda else [],
        "dtypes": sorted(_DTYPE_NAMES.get(d, d) for d in _items(request["FLASHSDPA_DTYPES"])) if with_cuda else [],
        "head_dims": sorted(int(d) for d in _items(request["FLASHSDPA_HEAD_DIMS"])) if with_cuda else [],
        "kernel_families": sorted(families) if with_cuda else [],
    }


def mismatches(build: dict[str, Any], request: dict[str, Any]) -> list[str]:
    """One sentence per way ``build`` (build_info()) differs from what ``request`` asked for."""
    want = expected_build(request)
    found: list[str] = []
    if bool(build["with_cuda"]) != want["with_cuda"]:
        asked = f"FLASHSDPA_CUDA={request['FLASHSDPA_CUDA']}, CUDA compiler {request.get('cuda_compiler')}"
        found.append(
            f"with_cuda={bool(build['with_cuda'])}: the build was asked for "
            f"{'CUDA kernels' if want['with_cuda'] else 'a CPU-only module'} ({asked})"
        )
        return found  # everything below follows from this one
    for key, knob in (("archs", "ARCHS"), ("dtypes", "DTYPES"), ("head_dims", "HEAD_DIMS")):
        got = sorted(build[key])
        if got != want[key]:
            asked = request[f"FLASHSDPA_{knob}"]
            found.append(f"{key}={got}: the build was asked for {want[key]} (FLASHSDPA_{knob}={asked})")
    missing = sorted(set(want["kernel_families"]) - set(build["kernel_families"]))
    if missing:
        found.append(
            f"kernel_families={sorted(build['kernel_families'])}: missing {missing} "
            f"(FLASHSDPA_ARCHS={request['FLASHSDPA_ARCHS']})"
        )
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flashsdpa.buildcheck", description=__doc__)
    parser.add_argument(
        "--require-cuda", action="store_true", help="also fail when _C has no CUDA kernels (CI, where nvcc is present)"
    )
    args = parser.parse_args(argv)
    from flashsdpa import _backend

    build = _backend.build_info()
    problems = []
    if build["import_error"] is not None:
        problems.append(f"flashsdpa._C does not import: {build['import_error']}")
    else:
        request = load_request()
        if request is None:
            problems.append(f"no {REQUEST_FILE.name} next to _C: build it with setup.py (pip install -e .)")
        else:
            problems += mismatches(build, request)
        if args.require_cuda and not build["with_cuda"]:
            problems.append("with_cuda=False: --require-cuda (nvcc is present) needs a build with CUDA kernels")
    if problems:
        for problem in problems:
            print(f"buildcheck: FAILED: {problem}")
        return 1
    summary = (
        f"CUDA kernels, families {build['kernel_families']}, archs {build['archs']}, dtypes {build['dtypes']}, "
        f"head dims {build['head_dims']}"
        if build["with_cuda"]
        else "CPU-only (as asked)"
    )
    print(f"buildcheck: ok: flashsdpa._C has what its build was asked for: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
