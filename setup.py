"""Thin CMake driver: `pip install [-e] .` configures and builds flashsdpa._C with CMake + Ninja.

Environment knobs (forwarded to CMake; see CMakeLists.txt):
  FLASHSDPA_CUDA=AUTO|ON|OFF, FLASHSDPA_ARCHS="80;90", FLASHSDPA_DTYPES="fp16;bf16",
  FLASHSDPA_HEAD_DIMS="32;64;96;128;192;256;512", FLASHSDPA_FAMILIES="sm80", FLASHSDPA_BUILD_JOBS (default: all cores),
  FLASHSDPA_BUILD_DIR (keep the CMake build tree between installs for incremental rebuilds).
Lists may use ',' or ';'.

Every build reflects exactly the environment it was given (issue 10, item 4): CMake's cache would
otherwise keep an earlier build's FLASHSDPA_* values (a narrowed FLASHSDPA_HEAD_DIMS, or
FLASHSDPA_CUDA=OFF) when a later build leaves the variable unset. So every configure first drops
the FLASHSDPA_* cache entries (-U) and then passes every knob explicitly, CMakeLists.txt's default
where the environment has none. What was asked is written next to _C as _build_request.json, which
flashsdpa.buildcheck compares with what _C reports it contains.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
FORWARDED = ("FLASHSDPA_CUDA", "FLASHSDPA_ARCHS", "FLASHSDPA_DTYPES", "FLASHSDPA_HEAD_DIMS", "FLASHSDPA_FAMILIES")
REQUEST_FILE = "_build_request.json"
ROUTERS_LIBRARY = "libflashsdpa_routers.so"  # CMake's flashsdpa_routers target (routers/routers.cpp)


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        output_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        build_dir = Path(os.environ.get("FLASHSDPA_BUILD_DIR", ROOT / "build" / "cmake"))
        build_dir.mkdir(parents=True, exist_ok=True)
        args = configure_args(output_dir)
        request = build_request()
        (output_dir / REQUEST_FILE).parent.mkdir(parents=True, exist_ok=True)
        (output_dir / REQUEST_FILE).write_text(json.dumps(request, indent=1) + "\n")
        self._request_written = output_dir / REQUEST_FILE
        (output_dir / ROUTERS_LIBRARY).unlink(missing_ok=True)  # each build makes it again, or not
        cmake = shutil.which("cmake") or "cmake"
        subprocess.run([cmake, "-S", str(ROOT), "-B", str(build_dir), *args], check=True)
        jobs = os.environ.get("FLASHSDPA_BUILD_JOBS", str(os.cpu_count() or 2))
        # The default target: _C and, where CMake configured it, the C++ routers' library.
        subprocess.run([cmake, "--build", str(build_dir), "-j", jobs], check=True)
        self._output_dir = output_dir

    def copy_extensions_to_source(self) -> None:
        # In-place and editable builds copy _C into python/flashsdpa; its request and the C++
        # routers' library (or its absence: a stale one must not outlive a build without it) go with it.
        super().copy_extensions_to_source()
        package = ROOT / "python" / "flashsdpa"
        written = getattr(self, "_request_written", None)
        if written is not None and written.exists():
            shutil.copyfile(written, package / REQUEST_FILE)
        output_dir = getattr(self, "_output_dir", None)
        if output_dir is not None and output_dir.resolve() != package.resolve():
            built = output_dir / ROUTERS_LIBRARY
            if built.exists():
                shutil.copyfile(built, package / ROUTERS_LIBRARY)
            else:
                (package / ROUTERS_LIBRARY).unlink(missing_ok=True)


def configure_args(output_dir: Path, environ: dict[str, str] | None = None) -> list[str]:
    """The CMake configure arguments for this environment (tests/test_build.py configures with them)."""
    request = build_request(environ)
    # -U first: CMake applies -U and -D in command-line order, so the cache keeps no knob from an
    # earlier configure, and every knob is then set from this environment alone (defaults included).
    args = ["-U", "FLASHSDPA_*", *(f"-D{key}={request[key]}" for key in FORWARDED)]
    args += [
        f"-DPython_EXECUTABLE={sys.executable}",
        f"-DFLASHSDPA_OUTPUT_DIR={output_dir}",
        "-DCMAKE_BUILD_TYPE=Release",
    ]
    if shutil.which("ninja") or _python_has("ninja"):
        args.append("-GNinja")
    try:
        import pybind11

        args.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
    except ImportError:
        pass
    return args


def cmake_defaults() -> dict[str, str]:
    """The default of every FLASHSDPA_* cache variable, read from CMakeLists.txt (its one statement)."""
    text = (ROOT / "CMakeLists.txt").read_text()
    return dict(re.findall(r'^set\((FLASHSDPA_\w+) "([^"]*)" CACHE', text, flags=re.MULTILINE))


def build_request(environ: dict[str, str] | None = None) -> dict[str, object]:
    """What this environment asks the build for: every forwarded knob, CMake's default where unset,
    plus the CUDA compiler a FLASHSDPA_CUDA=AUTO build would find."""
    environ = dict(os.environ) if environ is None else environ
    defaults = cmake_defaults()
    request: dict[str, object] = {}
    for key in FORWARDED:
        value = environ.get(key, "").strip()
        request[key] = value.replace(",", ";") if value else defaults.get(key, "")
    request["given"] = sorted(key for key in FORWARDED if environ.get(key, "").strip())
    request["cuda_compiler"] = environ.get("CUDACXX") or shutil.which("nvcc", path=environ.get("PATH"))
    return request


def _python_has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


# Guarded so tests can import the helpers above; pip and `python setup.py` run it as __main__.
if __name__ == "__main__":
    setup(
        name="flashsdpa",
        version="0.1.0",
        description="Exact FlashAttention CUDA kernels behind torch.nn.functional.scaled_dot_product_attention",
        package_dir={"": "python"},
        packages=find_packages("python"),
        ext_modules=[CMakeExtension("flashsdpa._C")],
        cmdclass={"build_ext": CMakeBuild},
        # 3.11: the code uses datetime.UTC. torch 2.11: the oldest torch the shim supports and is tested
        # on (torch.library.get_kernel needs 2.9, the flash-attention registry 2.10; _C itself has no
        # torch dependency, so torch is a run-time requirement only, never a build one).
        python_requires=">=3.11",
        install_requires=["torch>=2.11"],
        entry_points={"console_scripts": ["flashsdpa = flashsdpa.cli:main"]},
        zip_safe=False,
    )
