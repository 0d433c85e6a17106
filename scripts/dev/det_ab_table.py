"""det_ab_table.py: the table of a deterministic-mode A/B between builds, from the `bench
--deterministic --rounds 1` runs a dev script made per build and round (/tmp/b_NAME_ROUND/results.json).
Per case: each variant's deterministic ms / the reference's, a round per column, and each build's
deterministic / default ratio per round. Shared by scripts/dev/session47_det_ab.sh and
session48_det_writers.sh.

    python3 scripts/dev/det_ab_table.py ROUNDS REFERENCE VARIANT [VARIANT ...]
"""

from __future__ import annotations

import json
import sys


def _ratio(a: float | None, b: float | None) -> float:
    return a / b if a and b else float("nan")


def main(argv: list[str]) -> None:
    rounds, names = int(argv[0]), argv[1:]
    rows: dict[str, dict[str, list[tuple[float | None, float | None]]]] = {}
    for r in range(1, rounds + 1):
        for name in names:
            try:
                with open(f"/tmp/b_{name}_{r}/results.json") as f:
                    got = json.load(f)["deterministic"]["rows"]
            except (OSError, KeyError, ValueError, TypeError):
                continue
            for row in got:
                rows.setdefault(row["case"], {}).setdefault(name, []).append((row["deterministic_ms"], row["default_ms"]))
    ref, variants = names[0], names[1:]
    print(f"{'case':<30} det ms / {ref}'s, per round: {' | '.join(variants)}  || det / default: {' | '.join(names)}")
    for case, d in rows.items():
        cols = [" ".join(f"{_ratio(a[0], b[0]):.3f}" for a, b in zip(d.get(v, []), d.get(ref, []))) for v in variants]
        own = [" ".join(f"{_ratio(a[0], a[1]):.3f}" for a in d.get(name, [])) for name in names]
        print(f"{case:<30} {' | '.join(f'{c:<20}' for c in cols)} || {' | '.join(own)}")


if __name__ == "__main__":
    main(sys.argv[1:])
