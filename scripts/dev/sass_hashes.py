"""sass_hashes.py: compile instantiation TUs as the build does for sm_90a and print, per kernel, a
hash of its SASS with addresses and encodings stripped, so that two trees compare kernel by kernel
without a GPU (how a change proves the kernels it did not mean to touch byte-identical).

    python3 scripts/dev/sass_hashes.py fwd_sm90_bf16_hdim128 [TU ...] [--flags "-DX=1"] > hashes.txt
    diff base.txt new.txt

Needs nvcc and cuobjdump (with nvdisasm) on PATH (`pip install nvidia-cuda-cuobjdump
nvidia-cuda-nvdisasm` puts them under site-packages/nvidia/cu13/bin).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_INSTR = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s*(.*?)\s*(/\*.*)?$")


def kernel_sass(cubin: Path) -> dict[str, list[str]]:
    text = subprocess.run(["cuobjdump", "-sass", str(cubin)], check=True, capture_output=True, text=True).stdout
    kernels: dict[str, list[str]] = {}
    name = None
    for line in text.splitlines():
        if "Function :" in line:
            name = line.split("Function :", 1)[1].strip()
            kernels[name] = []
        elif name is not None and (m := _INSTR.match(line)):
            kernels[name].append(m.group(1).rstrip(" ;"))
    return kernels


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tus", nargs="+", help="cuda/instantiations/NAME.cu names, without .cu")
    parser.add_argument("--flags", default="", help="extra nvcc flags (e.g. -DFLASHSDPA_...=1)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for tu in args.tus:
            cubin = Path(tmp) / f"{tu}.cubin"
            subprocess.run(
                ["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr",
                 "-std=c++17", *shlex.split(args.flags), f"-I{ROOT / 'backend/include'}", f"-I{ROOT / 'cuda'}",
                 "-cubin", "-o", str(cubin), str(ROOT / "cuda/instantiations" / f"{tu}.cu")],
                check=True,
            )  # fmt: skip
            for name, lines in sorted(kernel_sass(cubin).items()):
                digest = hashlib.sha1("\n".join(lines).encode()).hexdigest()[:12]
                print(f"{digest} {len(lines):6d} {tu} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
