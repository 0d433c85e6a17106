"""Thin CMake driver: `pip install [-e] .` configures and builds flashsdpa._C with CMake + Ninja.

Environment knobs (forwarded to CMake; see CMakeLists.txt):
  FLASHSDPA_CUDA=AUTO|ON|OFF, FLASHSDPA_ARCHS="80;90", FLASHSDPA_DTYPES="fp16;bf16",
  FLASHSDPA_HEAD_DIMS="32;64;96;128;192;256", FLASHSDPA_FAMILIES="sm80", FLASHSDPA_BUILD_JOBS (default: all cores),
  FLASHSDPA_BUILD_DIR (keep the CMake build tree between installs for incremental rebuilds).
Lists may use ',' or ';'.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
FORWARDED = ("FLASHSDPA_CUDA", "FLASHSDPA_ARCHS", "FLASHSDPA_DTYPES", "FLASHSDPA_HEAD_DIMS", "FLASHSDPA_FAMILIES")


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        output_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        build_dir = Path(os.environ.get("FLASHSDPA_BUILD_DIR", ROOT / "build" / "cmake"))
        build_dir.mkdir(parents=True, exist_ok=True)
        args = [
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
        for key in FORWARDED:
            if os.environ.get(key):
                args.append(f"-D{key}={os.environ[key].replace(',', ';')}")
        cmake = shutil.which("cmake") or "cmake"
        subprocess.run([cmake, "-S", str(ROOT), "-B", str(build_dir), *args], check=True)
        jobs = os.environ.get("FLASHSDPA_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.run([cmake, "--build", str(build_dir), "--target", "_C", "-j", jobs], check=True)


def _python_has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


setup(
    name="flashsdpa",
    version="0.1.0",
    description="Exact FlashAttention CUDA kernels behind torch.nn.functional.scaled_dot_product_attention",
    package_dir={"": "python"},
    packages=find_packages("python"),
    ext_modules=[CMakeExtension("flashsdpa._C")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    zip_safe=False,
)
