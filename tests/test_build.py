# test_build.py: builds that say what they built (issue 10, items 3, 4, 5 and 7), on CPU:
# the compiled module is there and holds what its build was asked for (a missing _C fails the CPU
# suite), buildcheck names every mismatch, two CMake configures never leak a knob from the first
# into the second, bootstrap says what it will build, `explain` / `info` report a GPU without a
# driver instead of crashing, and the package metadata requires what the code needs.
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from expecttest import assert_expected_inline

import flashsdpa
from flashsdpa import _backend, buildcheck, cli

ROOT = Path(__file__).resolve().parents[1]


def _setup_module() -> Any:
    spec = importlib.util.spec_from_file_location("flashsdpa_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # setup() itself runs only as __main__
    return module


# ---- the compiled module is there and is what was asked --------------------------------------------


def test_compiled_module_loads() -> None:
    """Without _C every call silently falls back: the CPU suite must fail, not pass around it."""
    assert _backend.IMPORT_ERROR is None, f"flashsdpa._C does not import: {_backend.IMPORT_ERROR}"


def test_build_matches_its_request() -> None:
    request = buildcheck.load_request()
    assert request is not None, f"no {buildcheck.REQUEST_FILE}: build _C with setup.py (pip install -e .)"
    assert buildcheck.mismatches(flashsdpa.build_info(), request) == []


_FULL = {
    "FLASHSDPA_CUDA": "AUTO",
    "FLASHSDPA_ARCHS": "80;90",
    "FLASHSDPA_DTYPES": "fp16;bf16",
    "FLASHSDPA_HEAD_DIMS": "32;64;96;128;192;256",
    "given": [],
    "cuda_compiler": "/usr/local/cuda/bin/nvcc",
}
_CPU_ONLY = {"with_cuda": False, "archs": [], "dtypes": [], "head_dims": [], "kernel_families": []}


def test_buildcheck_names_each_mismatch() -> None:
    assert_expected_inline(
        "\n".join(buildcheck.mismatches(_CPU_ONLY, _FULL)),
        """with_cuda=False: the build was asked for CUDA kernels (FLASHSDPA_CUDA=AUTO, CUDA compiler /usr/local/cuda/bin/nvcc)""",
    )
    sticky = {"with_cuda": True, "archs": [90], "dtypes": ["bfloat16"], "head_dims": [128], "kernel_families": ["sm80"]}
    assert_expected_inline(
        "\n".join(buildcheck.mismatches(sticky, _FULL)),
        """\
archs=[90]: the build was asked for [80, 90] (FLASHSDPA_ARCHS=80;90)
dtypes=['bfloat16']: the build was asked for ['bfloat16', 'float16'] (FLASHSDPA_DTYPES=fp16;bf16)
head_dims=[128]: the build was asked for [32, 64, 96, 128, 192, 256] (FLASHSDPA_HEAD_DIMS=32;64;96;128;192;256)
kernel_families=['sm80']: missing ['sm90'] (FLASHSDPA_ARCHS=80;90)""",
    )
    narrow = dict(_FULL, FLASHSDPA_ARCHS="90", FLASHSDPA_DTYPES="bf16", FLASHSDPA_HEAD_DIMS="128")
    assert buildcheck.mismatches(dict(sticky, kernel_families=["sm80", "sm90"]), narrow) == []
    assert buildcheck.mismatches(_CPU_ONLY, dict(_FULL, FLASHSDPA_CUDA="OFF")) == []
    assert buildcheck.mismatches(_CPU_ONLY, dict(_FULL, cuda_compiler=None)) == []


def test_buildcheck_command(capsys: pytest.CaptureFixture[str]) -> None:
    rc = buildcheck.main([])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.startswith("buildcheck: ok: flashsdpa._C has what its build was asked for")


# ---- item 4: every build reflects exactly its environment ------------------------------------------


def _configure(build_dir: Path, environ: dict[str, str]) -> dict[str, str]:
    setup = _setup_module()
    args = setup.configure_args(build_dir / "out", environ)
    cmake = shutil.which("cmake") or "cmake"
    env = dict(os.environ, **{k: v for k, v in environ.items() if k == "CUDACXX"})
    subprocess.run([cmake, "-S", str(ROOT), "-B", str(build_dir), *args], check=True, capture_output=True, env=env)
    cache = (build_dir / "CMakeCache.txt").read_text().splitlines()
    return {
        line.split(":", 1)[0]: line.split("=", 1)[1]
        for line in cache
        if line.startswith("FLASHSDPA_") and ":" in line and "=" in line
    }


@pytest.mark.skipif(shutil.which("cmake") is None and importlib.util.find_spec("cmake") is None, reason="no cmake")
def test_configure_is_not_sticky(tmp_path: Path) -> None:
    """A narrowed configure, then a plain one: the second has every default back (CMake's cache
    used to keep FLASHSDPA_HEAD_DIMS=128 and FLASHSDPA_CUDA=OFF across builds)."""
    narrowed = {"FLASHSDPA_CUDA": "OFF", "FLASHSDPA_HEAD_DIMS": "128", "FLASHSDPA_DTYPES": "bf16"}
    first = _configure(tmp_path, narrowed)
    assert (first["FLASHSDPA_CUDA"], first["FLASHSDPA_HEAD_DIMS"], first["FLASHSDPA_DTYPES"]) == ("OFF", "128", "bf16")
    # The plain configure: no knob set. A compiler that does not exist keeps AUTO's probe quick.
    second = _configure(tmp_path, {"CUDACXX": str(tmp_path / "no-nvcc")})
    defaults = _setup_module().cmake_defaults()
    for knob in ("FLASHSDPA_CUDA", "FLASHSDPA_ARCHS", "FLASHSDPA_DTYPES", "FLASHSDPA_HEAD_DIMS"):
        assert second[knob] == defaults[knob], (knob, second[knob])
    assert second["FLASHSDPA_CUDA"] == "AUTO"


def test_build_request_resolves_defaults() -> None:
    setup = _setup_module()
    request = setup.build_request({"FLASHSDPA_HEAD_DIMS": "64,128", "PATH": "/nonexistent"})
    assert request["FLASHSDPA_HEAD_DIMS"] == "64;128" and request["given"] == ["FLASHSDPA_HEAD_DIMS"]
    assert request["FLASHSDPA_CUDA"] == "AUTO" and request["FLASHSDPA_DTYPES"] == "fp16;bf16"
    assert request["cuda_compiler"] is None


def _bootstrap_plan(**environ: str) -> str:
    env = dict(os.environ, FLASHSDPA_SKIP_INSTALL="1", **environ)
    for knob in ("FLASHSDPA_CUDA", "FLASHSDPA_ARCHS", "FLASHSDPA_DTYPES", "FLASHSDPA_HEAD_DIMS"):
        if knob not in environ:
            env.pop(knob, None)
    done = subprocess.run(["bash", str(ROOT / "scripts/bootstrap.sh")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_bootstrap_says_what_it_builds() -> None:
    """FLASHSDPA_CUDA=OFF with nvcc on PATH used to print "building with CUDA kernels"."""
    assert "a CPU-only flashsdpa._C (FLASHSDPA_CUDA=OFF" in _bootstrap_plan(FLASHSDPA_CUDA="OFF")
    if shutil.which("nvcc"):
        plan = _bootstrap_plan(FLASHSDPA_HEAD_DIMS="128")
        assert "with CUDA kernels" in plan and plan.endswith("FLASHSDPA_HEAD_DIMS=128)")


# ---- item 5: a machine with nvcc and no GPU driver --------------------------------------------------

_NO_DRIVER = "flashsdpa: cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version"


def test_explain_and_info_without_a_driver(
    fake_build: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CUDA build of _C whose runtime finds no usable driver: explain judges the call for a GPU
    the build serves and says why none is usable here; info reports it; neither raises."""
    build = fake_build()

    def no_driver(index: int) -> dict[str, Any]:
        raise RuntimeError(_NO_DRIVER)

    monkeypatch.setattr(build, "device_info", no_driver)
    assert cli.main(["explain"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert_expected_inline(
        "\n".join(out[1:]),
        """\
no usable GPU (device 0): flashsdpa: cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version; the verdict below is for a GPU this build serves
served by flashsdpa""",
    )
    assert cli.main(["explain", "--head-dim", "256", "--dtype", "fp32"]) == 1
    assert "needs float16 or bfloat16" in capsys.readouterr().out
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    if torch.cuda.is_available():  # torch sees the GPU; _C's runtime does not
        assert f"not served: no usable GPU (device 0): {_NO_DRIVER}" in out
    else:
        (gpus,) = [line for line in out.splitlines() if line.startswith("GPUs")]
        assert "none: no usable GPU: torch.cuda.is_available() is False" in gpus and _NO_DRIVER in gpus


def test_cli_subprocess_exit_codes() -> None:
    """The real module as a user runs it (in CI: a CUDA build on a machine without a driver)."""
    env = dict(os.environ, PYTHONPATH=str(Path(flashsdpa.__file__).resolve().parents[1]))
    # explain's default call (bf16, head dim 128) is served by every CUDA build, GPU or not; a
    # CPU-only module falls back (exit 1) and says so.
    explain_rc = 0 if flashsdpa.build_info()["with_cuda"] else 1
    for argv, want in ((["explain"], explain_rc), (["info"], 0), (["info", "--json"], 0)):
        done = subprocess.run([sys.executable, "-m", "flashsdpa", *argv], env=env, capture_output=True, text=True)
        assert done.returncode == want, (argv, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
    done = subprocess.run([sys.executable, "-m", "flashsdpa", "--version"], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout.strip()) == (0, f"flashsdpa {flashsdpa.__version__}")


# ---- item 7: packaging ------------------------------------------------------------------------------


def test_package_metadata(tmp_path: Path) -> None:
    """The wheel's metadata requires torch and the Python the code needs (datetime.UTC: 3.11)."""
    subprocess.run(
        [sys.executable, str(ROOT / "setup.py"), "-q", "egg_info", "--egg-base", str(tmp_path)],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip
    (info,) = tmp_path.glob("*.egg-info")
    pkg_info = (info / "PKG-INFO").read_text()
    assert "Requires-Python: >=3.11" in pkg_info
    assert (info / "requires.txt").read_text().split() == ["torch>=2.11"]
    assert "flashsdpa = flashsdpa.cli:main" in (info / "entry_points.txt").read_text()
    assert f"Version: {flashsdpa.__version__}" in pkg_info
