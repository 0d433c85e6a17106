"""ab_table.py: the table of an A/B between builds from `bwd_ab.py --json` lines, one file per
build (DIR/ab_NAME.jsonl, a line per problem and round: {"problem", "base", "cudnn"} TFLOP/s).
Per problem: the reference build's median, each variant / reference as the median of per-round
ratios, and each build / its own process's cuDNN. Shared by the dev A/B scripts.

    python3 scripts/dev/ab_table.py DIR REFERENCE VARIANT [VARIANT ...]
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any


def load(path: str) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            rows.setdefault(r["problem"], []).append(r)
    return rows


def ratio(num: list[dict[str, Any]], den: list[dict[str, Any]]) -> float:
    k = min(len(num), len(den))
    return statistics.median(num[i]["base"] / den[i]["base"] for i in range(k)) if k else float("nan")


def main() -> None:
    directory, reference, *variants = sys.argv[1:]
    ref = load(f"{directory}/ab_{reference}.jsonl")
    others = {n: load(f"{directory}/ab_{n}.jsonl") for n in variants}
    header = f"{'problem':32s} {reference:>8s} " + " ".join(f"{n + '/' + reference:>12s}" for n in variants)
    print(header + " " + " ".join(f"{n + '/cuDNN':>12s}" for n in (reference, *variants)))
    for problem, rr in ref.items():
        cells = [ratio(others[n].get(problem, []), rr) for n in variants]
        vs_cudnn = [statistics.median(r["base"] / r["cudnn"] for r in rows) if rows else float("nan")
                    for rows in (rr, *(others[n].get(problem, []) for n in variants))]  # fmt: skip
        print(f"{problem:32s} {statistics.median(r['base'] for r in rr):8.1f} "
              + " ".join(f"{c:12.3f}" for c in cells) + " " + " ".join(f"{c:12.3f}" for c in vs_cudnn))


if __name__ == "__main__":
    main()
