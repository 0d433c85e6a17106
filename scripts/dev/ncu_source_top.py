"""ncu_source_top.py: where a kernel's warps stall, from Nsight Compute's source page exported as CSV
(`ncu --import R.ncu-rep --page source --csv --print-source sass`): the instructions with the most
warp-stall samples (address, SASS, samples, share), then the samples summed by opcode, so the
consumers' waits (mbarrier try-waits, wgmma waits, shared loads) can be told from the producer's,
and last the samples summed by how many times each instruction ran: code that runs once a tile and
once a key block shows apart (session 35: the sm90 forward's tile boundary at S 512).

    python3 scripts/dev/ncu_source_top.py SOURCE.csv[.gz] [--top 40]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import re
from collections import Counter


def _rows(path: str) -> list[dict[str, str]]:
    raw = gzip.open(path, "rt") if path.endswith(".gz") else open(path)
    with raw as f:
        text = f.read()
    lines = text.splitlines()
    # ncu prints banner lines (==PROF== ...) before the table: start at the header row.
    start = next((i for i, line in enumerate(lines) if line.startswith('"Address"') or line.startswith('"#"')), 0)
    return list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))


def _number(value: str) -> float:
    try:
        return float(value.replace(",", ""))
    except ValueError:
        return 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    rows = _rows(args.csv)
    if not rows:
        raise SystemExit(f"{args.csv}: no rows")
    columns = list(rows[0])
    stall = next((c for c in columns if "Warp Stall Sampling (All" in c), None)
    not_issued = next((c for c in columns if "Not-issued" in c or "Not Issued" in c), None)
    source = next((c for c in columns if c.strip().lower() == "source"), columns[1])
    address = next((c for c in columns if c.strip().lower() == "address"), columns[0])
    if stall is None:
        raise SystemExit(f"no warp-stall column among {columns}")
    total = sum(_number(r[stall]) for r in rows) or 1.0
    print(f"{len(rows)} instructions, {total:.0f} stall samples ({stall})")
    for r in sorted(rows, key=lambda r: -_number(r[stall]))[: args.top]:
        extra = f" not-issued {_number(r[not_issued]):8.0f}" if not_issued else ""
        print(f"  {r[address]:>8s} {_number(r[stall]):8.0f} {100 * _number(r[stall]) / total:5.1f}%{extra}  {r[source][:90]}")
    by_op: Counter[str] = Counter()
    for r in rows:
        m = re.match(r"\s*(@!?U?P\w+\s+)?([A-Z0-9_]+(\.[A-Z0-9_]+)?)", r[source])
        by_op[m.group(2) if m else "?"] += _number(r[stall])
    print("by opcode:")
    for op, n in by_op.most_common(25):
        print(f"  {op:28s} {n:8.0f} {100 * n / total:5.1f}%")
    executed = next((c for c in columns if c.strip() == "Instructions Executed"), None)
    if executed is not None:
        by_count: Counter[int] = Counter()
        instrs: Counter[int] = Counter()
        for r in rows:
            by_count[int(_number(r[executed]))] += _number(r[stall])
            instrs[int(_number(r[executed]))] += 1
        print("by times executed (warp-level executions of each instruction):")
        for count, n in by_count.most_common(10):
            print(f"  {count:10d} x {instrs[count]:5d} instructions {n:8.0f} {100 * n / total:5.1f}%")


if __name__ == "__main__":
    main()
