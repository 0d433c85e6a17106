"""live_regs.py: where a kernel's register pressure peaks, from nvdisasm's live-register count
(no GPU needed). ptxas says only that it spilled or serialized the wgmmas (C7512: "insufficient
register resources"); `nvdisasm -lrm count` prints the number of live registers after every SASS
instruction, which locates the peak. Session 16 found that way that the 80-query backward step
held P^T's 16-bit copy beside P^T, dP^T, dV and dK (253 live), and cut it to 233
(docs/kernel_notes_bwd_sm90.md). Compile a variant with its setmaxnreg budget raised past the
hardware's (e.g. 256, compile only) to see how many registers it wants where 240 serialize.

    python3 scripts/dev/live_regs.py OBJ.o 'ModsKindE0ELb0E' [--above 236] [--top 40]
    python3 scripts/dev/live_regs.py cuda/instantiations/bwd_sm90_bf16_hdim128.cu 'ModsKindE0ELb0E' -D FOO=1

A .cu argument is compiled first (sm_90a, -O3, the project's include paths, the -D flags given).
cuobjdump and nvdisasm come from PATH or from the nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm wheels.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROW = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?);.*//\s*\|\s*(\d+)")


def tool(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for site in sys.path:
        for path in glob.glob(os.path.join(site, "nvidia", "cu*", "bin", name)):
            return path
    raise SystemExit(f"{name} not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")


def compile_tu(source: str, defines: list[str], out: str) -> None:
    cmd = ["nvcc", "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a", "-O3", "-DNDEBUG",
           "--expt-relaxed-constexpr", "-Xptxas", "-v", f"-I{ROOT}/backend/include", f"-I{ROOT}/cuda",
           *[f"-D{d}" for d in defines], "-c", source, "-o", out]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-4000:])
    for line in done.stderr.splitlines():
        if "C75" in line or ("spill" in line and " 0 bytes spill stores" not in line):
            print(line[:200])


def rows_of(obj: str, pattern: str) -> tuple[str, list[tuple[str, str, int]]]:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([tool("cuobjdump"), "-xelf", "all", os.path.abspath(obj)], cwd=tmp, capture_output=True,
                       check=True)  # fmt: skip
        cubins = sorted(glob.glob(os.path.join(tmp, "*.cubin")))
        if not cubins:
            raise SystemExit(f"no cubin in {obj}")
        text = "".join(subprocess.run([tool("nvdisasm"), "-lrm", "count", c], capture_output=True, text=True).stdout
                       for c in cubins)  # fmt: skip
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith(".text.") and re.search(pattern, line):
            name = line.split(":")[0].removeprefix(".text.")
            rows = []
            for body in lines[i + 1:]:
                if body.startswith("\t.section"):
                    break
                m = ROW.search(body)
                if m:
                    rows.append((m.group(1), m.group(2).strip(), int(m.group(3))))
            return name, rows
    raise SystemExit(f"no kernel matching {pattern!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("obj", help="an object file, or a .cu to compile first")
    parser.add_argument("kernel", help="a regex on the kernel's mangled name")
    parser.add_argument("-D", dest="defines", action="append", default=[], help="a macro for the .cu compile")
    parser.add_argument("--above", type=int, help="print every instruction with at least this many live (default: peak - 4)")
    parser.add_argument("--top", type=int, default=60, help="at most this many instructions printed")
    args = parser.parse_args()
    obj = args.obj
    with tempfile.TemporaryDirectory() as tmp:
        if obj.endswith(".cu"):
            compiled = os.path.join(tmp, "tu.o")
            compile_tu(obj, args.defines, compiled)
            obj = compiled
        name, rows = rows_of(obj, args.kernel)
    peak = max(n for _, _, n in rows)
    print(f"{name[:150]}\n{len(rows)} instructions, at most {peak} registers live")
    above = peak - 4 if args.above is None else args.above
    shown = [r for r in rows if r[2] >= above][: args.top]
    for address, instruction, live in shown:
        print(f"  {address} {live:4d}  {instruction[:100]}")


if __name__ == "__main__":
    main()
