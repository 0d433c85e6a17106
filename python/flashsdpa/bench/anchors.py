# bench/anchors.py: FlashAttention-4's numbers on our H200, as measured once by hand.
#
# FA4 (flash_attn.cute, the flash-attn-4 package) does not import on the GPU machine the benchmark
# runs on, yet the Hopper bars are "≥ 1.0x the best of cuDNN and FA4". These values stand in for
# it, printed in a column labelled "anchor" and never mixed with measured rows. They are copied
# from shared/anchors/h200_fa4_4.0.0b36_vs_cudnn.json so the benchmark needs no file outside the
# package wherever it runs; --anchors PATH reads a newer file of the same form.
"""FlashAttention-4 anchor values (TFLOP/s, H200, bf16, B*S = 16k, H*D = 2048)."""

from __future__ import annotations

import json
from pathlib import Path

ANCHOR_SOURCE = "h200_fa4_4.0.0b36_vs_cudnn.json (flash-attn-4 4.0.0b36, H200, bf16, one process with cuDNN)"

# (head_dim, seqlen, causal) -> {"fwd": TFLOP/s, "bwd": TFLOP/s}
FA4_ANCHORS: dict[tuple[int, int, bool], dict[str, float]] = {
    (128, 8192, False): {"fwd": 686.3, "bwd": 598.2},
    (128, 8192, True): {"fwd": 613.7, "bwd": 510.3},
    (128, 2048, False): {"fwd": 417.7, "bwd": 410.8},
    (64, 8192, False): {"fwd": 553.7, "bwd": 519.8},
    (256, 8192, False): {"fwd": 747.4, "bwd": 351.7},
    (128, 512, False): {"fwd": 267.1, "bwd": 187.7},
}


def load_anchors(path: str | Path) -> dict[tuple[int, int, bool], dict[str, float]]:
    """The FA4 rows of an anchors file of the form above ({"rows": [{D, S, causal, fa4_fwd, fa4_bwd}]})."""
    rows = json.loads(Path(path).read_text())["rows"]
    table: dict[tuple[int, int, bool], dict[str, float]] = {}
    for row in rows:
        values = {d: float(row[f"fa4_{d}"]) for d in ("fwd", "bwd") if row.get(f"fa4_{d}") is not None}
        if values:
            table[(int(row["D"]), int(row["S"]), bool(row["causal"]))] = values
    return table


def fa4_anchor(
    direction: str,
    head_dim: int,
    seqlen: int,
    causal: bool,
    table: dict[tuple[int, int, bool], dict[str, float]] | None = None,
) -> float | None:
    """FA4's anchor TFLOP/s for one sweep cell, or None where it was not measured."""
    return (FA4_ANCHORS if table is None else table).get((head_dim, seqlen, causal), {}).get(direction)
