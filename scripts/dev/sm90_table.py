#!/usr/bin/env python3
"""Folds fwd_check's `bench,...` lines (several rounds of the same configs) into one row per
config: TFLOP/s of each round and their median, so the run-to-run spread is visible."""
from __future__ import annotations

import statistics
import sys
from collections import defaultdict


def main(path: str) -> None:
    rounds: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    for line in open(path):
        parts = line.strip().split(",")
        if len(parts) != 7 or parts[0] != "bench" or parts[1] == "config":
            continue
        rounds[(parts[1], parts[2], parts[3], parts[4])].append(float(parts[6]))
    for (config, d, s, causal), values in rounds.items():
        vals = " ".join(f"{v:6.1f}" for v in values)
        print(f"{config:26s} d{d:<3s} S{s:<5s} c{causal}  median {statistics.median(values):6.1f}  [{vals}]")


if __name__ == "__main__":
    main(sys.argv[1])
