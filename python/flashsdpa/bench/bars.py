# bench/bars.py: the project's speed bars, judged on what this run measured, printed last.
#
# The bars come from the open issues: the Hopper forward (absolute TFLOP/s at D 128, 8k; every
# sweep cell from S = 512 >= 1.0x cuDNN; D 64 and D 256 >= 1.0x the best of cuDNN and FA4), the
# Hopper backward (absolute TFLOP/s; every cell from S = 1k >= 1.0x cuDNN; D 256 against cuDNN and
# FA4), decode (µs, TB/s, never slower than PyTorch's fastest), the models (inside enable() faster
# than the default / FA2-only) and the shim's overhead. A bar whose configuration this run did not
# measure is left out rather than failed; ratio bars use the medians of per-round ratios
# (rounds.py). Bars never change the exit code: it says whether the benchmark ran and our kernels
# were right, the bars say how fast they were.
"""Bars: value, target, PASS/FAIL, for every bar whose configuration this run measured."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from flashsdpa.bench.overhead import ATTENTION_STEP_BAR_US, ATTENTION_STEP_SHAPE, OVERHEAD_BARS_US
from flashsdpa.bench.problems import Result
from flashsdpa.bench.rounds import counts, ratios

# Absolute TFLOP/s of ours (direct API) at S = 8k: (direction, head_dim, causal) -> (target, stretch).
ABSOLUTE_TFLOPS: dict[tuple[str, int, bool], tuple[float, bool]] = {
    ("fwd", 128, False): (720.0, False),
    ("fwd", 128, True): (650.0, False),
    ("bwd", 128, False): (630.0, False),
    ("bwd", 128, True): (540.0, False),
    ("bwd", 64, False): (545.0, False),
    ("bwd", 256, False): (450.0, True),
    # Issue 14 (Gemma's global layers), judged when the sweep includes D 512 (`--head-dims ... 512`:
    # not in the standard sweep, whose full run would then pass the device's 10-minute call).
    ("fwd", 512, False): (600.0, False),
}
ABSOLUTE_SEQLEN = 8192
# Every sweep cell from this S against cuDNN (forward from 512, backward from 1k).
CELL_FROM = {"fwd": 512, "bwd": 1024}
# Head dims judged against the best of cuDNN and FA4, per direction.
CUDNN_FA4_DIMS = {"fwd": (64, 256), "bwd": (256,)}
STRETCH_CUDNN_FA4 = 1.05  # forward stretch: every cell >= 1.05x the best of cuDNN and FA4

DECODE_MAX_US = {(1, 8192): 15.0}  # (batch, keys) -> µs
DECODE_MIN_TBPS = {(1, 131072): 3.9, (32, 4096): 3.9}  # (batch, keys) -> TB/s
DECODE_PAGED_MAX_RATIO = 1.05  # attention_with_kvcache, paged (page 64) / contiguous cache time, every shape
# Model cases -> (ratio name, target, stretch); ratios are inside enable() over the other side.
MODEL_RATIO_BARS: dict[str, list[tuple[str, float, bool]]] = {
    "prefill B1x8k": [("default", 1.0, False)],
    "train B1x8k": [("default", 1.0, False)],
    "train B4x2k": [("default", 1.0, False)],
    "generate after 4k": [("default", 1.0, False), ("fa2", 1.0, False)],
    "generate after 12k": [("default", 1.0, False), ("fa2", 1.0, False)],
    "small train fp32": [("default", 1.02, False)],
    "small train bf16": [("default", 1.0, False), ("fa2", 1.0, False)],
}
MODEL_MS_STRETCH = {"train B1x8k": 70.0, "train B4x2k": 61.0}
# The shim-cost issue's per-call bars: bench/overhead.py's OVERHEAD_BARS_US (imported above).
WINDOW_MIN_RATIO = 0.9  # the window's rate on visible pairs over dense causal's (issue 8)
DETERMINISTIC_MAX_RATIO = 1.15  # our backward's time under use_deterministic_algorithms over the default's (issue 13)
# Masks through SDPA (issue 14), TFLOP/s with dense FLOPs: case -> (forward, backward); and ours
# at least the best of PyTorch's masked backends in every case and direction.
MASKED_MIN_TFLOPS = {"key padding S 2k": (600.0, 450.0), "key padding S 8k": (680.0, 520.0),
                     "additive bias S 2k": (420.0, 300.0)}  # fmt: skip
# Issue 14's feature rows (features.py): dropout 0.1 at S 4k, TFLOP/s (forward, backward), and ours at
# least the best of PyTorch's; softcap 50 at S 8k within 10% of no softcap, each direction.
DROPOUT_MIN_TFLOPS = (560.0, 450.0)
SOFTCAP_MIN_RATIO = 0.9


@dataclass
class Bar:
    part: str  # sweep | models | decode | window | masks | features | deterministic | overhead
    name: str
    value: float | None
    target: float
    unit: str
    higher_is_better: bool = True
    stretch: bool = False
    note: str = ""

    @property
    def verdict(self) -> str:
        if self.value is None:
            return "n/a"
        ok = self.value >= self.target if self.higher_is_better else self.value <= self.target
        return "PASS" if ok else "FAIL"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict}


def _causal(c: bool) -> str:
    return "causal" if c else "non-causal"


def _worst(cells: list[tuple[int, bool, float | None]], target: float) -> tuple[float | None, str]:
    """The worst cell's ratio and a note naming it and how many cells pass."""
    present = [(s, c, v) for s, c, v in cells if v is not None]
    if not present:
        return None, "no cell with both sides measured"
    s, c, v = min(present, key=lambda cell: cell[2])
    passing = sum(value >= target for _, _, value in present)
    missing = len(cells) - len(present)
    note = f"worst S={s} {_causal(c)}; {passing}/{len(present)} cells pass"
    return v, note + (f"; {missing} cell(s) not measured" if missing else "")


def sweep_bars(
    results: Sequence[Result],
    anchors: dict[tuple[int, int, bool], dict[str, float]] | None = None,
    fa4_note: str = "",
) -> list[Bar]:
    bars: list[Bar] = []
    rows = ratios(results, anchors)
    mine = {(r.direction, r.head_dim, r.seqlen, r.causal): r for r in results if r.backend == "flashsdpa"}
    for direction in ("fwd", "bwd"):
        for (d_dir, d, causal), (target, stretch) in ABSOLUTE_TFLOPS.items():
            r = mine.get((direction, d, ABSOLUTE_SEQLEN, causal))
            if d_dir != direction or r is None:
                continue
            value = r.tflops if counts(r) else None
            note = "" if counts(r) else f"ours: {r.status}"
            bars.append(
                Bar("sweep", f"{direction} D{d} 8k {_causal(causal)}", value, target, "TFLOP/s", True, stretch, note)
            )
        cells = [r for r in rows if r["direction"] == direction and r["seqlen"] >= CELL_FROM[direction]]
        for d in sorted({r["head_dim"] for r in cells}):
            mine_cells = [(r["seqlen"], r["causal"], r["ours_over_cudnn"]) for r in cells if r["head_dim"] == d]
            value, note = _worst(mine_cells, 1.0)
            bars.append(
                Bar("sweep", f"{direction} D{d} every cell S>={CELL_FROM[direction]} vs cuDNN", value, 1.0, "x", note=note)
            )
        for d in CUDNN_FA4_DIMS[direction]:
            group = [r for r in cells if r["head_dim"] == d]
            if not group:
                continue
            value, note = _worst([(r["seqlen"], r["causal"], r["ours_over_cudnn_fa4"]) for r in group], 1.0)
            sources = sorted({f"{r['fa4_source']} at S={r['seqlen']} {_causal(r['causal'])}" for r in group if r["fa4_source"]})
            fa4 = "FA4 " + ", ".join(sources) if sources else "no FA4 value (cuDNN alone)"
            bars.append(
                Bar(
                    "sweep",
                    f"{direction} D{d} every cell vs best of cuDNN, FA4",
                    value,
                    1.0,
                    "x",
                    note=f"{note}; {fa4}{'; ' + fa4_note if fa4_note and 'anchor' in fa4 else ''}",
                )
            )
        if direction == "fwd" and cells:
            value, note = _worst([(r["seqlen"], r["causal"], r["ours_over_cudnn_fa4"]) for r in cells], STRETCH_CUDNN_FA4)
            bars.append(
                Bar("sweep", "fwd every cell vs best of cuDNN, FA4", value, STRETCH_CUDNN_FA4, "x", True, True, note)
            )
    return bars


def model_bars(ratio_rows: Sequence[dict[str, Any]]) -> list[Bar]:
    """From models.model_ratios: per case, inside enable() over each other side (lower is better)."""
    bars: list[Bar] = []
    for row in ratio_rows:
        case = row["case"]
        for other, target, stretch in MODEL_RATIO_BARS.get(case, []):
            value = row.get(f"enable_over_{other}")
            label = {"default": "default", "fa2": "FA2-only"}[other]
            note = "ours served no call inside enable()" if row.get("enable_served_calls") == 0 else ""
            bars.append(Bar("models", f"{case}: enable() / {label}", value, target, "x", False, stretch, note))
        if case in MODEL_MS_STRETCH:
            bars.append(
                Bar("models", f"{case}: enable() ms", row.get("enable_ms"), MODEL_MS_STRETCH[case], "ms", False, True)
            )
    return bars


def decode_bars(rows: Sequence[dict[str, Any]]) -> list[Bar]:
    """From decode.py's rows: ours (direct API) per shape, in µs or TB/s, and against PyTorch's fastest."""
    bars: list[Bar] = []
    for row in rows:
        shape = (row["batch"], row["keys"])
        keys = row["keys"]
        label = f"decode B{row['batch']} x {f'{keys // 1024}k' if keys % 1024 == 0 else keys} keys"
        if shape in DECODE_MAX_US:
            bars.append(Bar("decode", f"{label}: ours µs", row.get("ours_us"), DECODE_MAX_US[shape], "µs", False))
        if shape in DECODE_MIN_TBPS:
            bars.append(Bar("decode", f"{label}: ours TB/s", row.get("ours_tbps"), DECODE_MIN_TBPS[shape], "TB/s"))
        bars.append(
            Bar(
                "decode",
                f"{label}: ours / fastest PyTorch",
                row.get("ours_over_fastest"),
                1.0,
                "x time",
                False,
                note=f"fastest: {row.get('fastest') or '-'}",
            )
        )
        if "paged_over_contiguous" in row:  # issue 11: a paged cache (page 64) within 5% of a contiguous one
            bars.append(Bar("decode", f"{label}: paged cache / contiguous", row.get("paged_over_contiguous"),
                            DECODE_PAGED_MAX_RATIO, "x time", False))  # fmt: skip
    return bars


def window_bars(summary: dict[str, Any]) -> list[Bar]:
    """From window.py's summary: the window's rate over dense causal's, forward and forward + backward."""
    return [
        Bar("window", f"4k window / 32k tokens, {direction}: rate / causal rate", d.get("window_over_causal"),
            WINDOW_MIN_RATIO, "x")
        for direction, d in summary.items()
    ]  # fmt: skip


def deterministic_bars(rows: Sequence[dict[str, Any]]) -> list[Bar]:
    """From deterministic.py's rows: the worst case's deterministic / default backward time."""
    measured = [r for r in rows if r.get("ratio") is not None]
    if not rows:
        return []
    if not measured:
        return [Bar("deterministic", "backward time, deterministic / default, worst case", None,
                    DETERMINISTIC_MAX_RATIO, "x", False, note="no case ran in both modes")]
    worst = max(measured, key=lambda r: r["ratio"])
    passing = sum(r["ratio"] <= DETERMINISTIC_MAX_RATIO for r in measured)
    note = f"worst {worst['case']}; {passing}/{len(measured)} cases pass"
    if len(measured) < len(rows):
        note += f"; {len(rows) - len(measured)} case(s) not measured"
    return [Bar("deterministic", "backward time, deterministic / default, worst case", worst["ratio"],
                DETERMINISTIC_MAX_RATIO, "x", False, note=note)]


def masked_bars(summary: list[dict[str, Any]]) -> list[Bar]:
    """From masked.py's summary: ours in TFLOP/s against the issue's floors, and over the best of
    PyTorch's masked backends (median of per-round ratios), per case and direction."""
    bars = []
    for s in summary:
        floors = MASKED_MIN_TFLOPS.get(s["case"])
        if floors is not None:
            target = floors[0] if s["direction"] == "fwd" else floors[1]
            bars.append(Bar("masks", f"{s['case']} {s['direction']}: ours TFLOP/s", s.get("ours_tflops"), target, "TFLOP/s"))
        bars.append(Bar("masks", f"{s['case']} {s['direction']}: ours / best PyTorch", s.get("ours_over_best_torch"), 1.0, "x"))
    return bars


def features_bars(summary: list[dict[str, Any]]) -> list[Bar]:
    """From features.py's summary: dropout's TFLOP/s against the issue's floors and over the best of
    PyTorch's; softcap's rate over no softcap's; per direction (medians of per-round ratios)."""
    bars = []
    for s in summary:
        fwd = s["direction"] == "fwd"
        if s["case"].startswith("dropout"):
            bars.append(Bar("features", f"{s['case']} {s['direction']}: ours TFLOP/s", s.get("ours_tflops"),
                            DROPOUT_MIN_TFLOPS[0 if fwd else 1], "TFLOP/s"))  # fmt: skip
            bars.append(Bar("features", f"{s['case']} {s['direction']}: ours / best PyTorch", s.get("ratio"), 1.0, "x"))
        else:
            bars.append(Bar("features", f"{s['case']} {s['direction']}: softcap / plain rate", s.get("ratio"),
                            SOFTCAP_MIN_RATIO, "x"))  # fmt: skip
    return bars


def overhead_bars(o: dict[str, Any] | None) -> list[Bar]:
    if not o:
        return []
    fields = {"no grad, equal work": "equal_shim_overhead_us", "grad (fwd)": "grad_shim_overhead_us",
              "backward": "bwd_shim_overhead_us", "unserved step (float32)": "unserved_step_overhead_us"}  # fmt: skip
    bars = [Bar("overhead", f"shim per-call overhead, {name}", o.get(field), OVERHEAD_BARS_US[name], "µs", False)
            for name, field in fields.items()]  # fmt: skip
    if "attention_step_vs_flash_us" in o:
        shape = "x".join(str(n) for n in o.get("attention_step_shape", ATTENTION_STEP_SHAPE))
        bars.append(Bar("overhead", f"attention step {shape} causal fwd+bwd: ours - FA2 only",
                        o.get("attention_step_vs_flash_us"), ATTENTION_STEP_BAR_US, "µs", False))  # fmt: skip
    return bars


def print_bars(bars: Sequence[Bar], out: Any = None) -> None:
    out = out or sys.stdout  # bound at call time: pytest and callers may swap sys.stdout
    if not bars:
        return
    width = max(len(b.name) for b in bars)
    print("\nBars (ratios: medians of per-round ratios; stretch bars marked *)", file=out)
    for b in bars:
        value = "-" if b.value is None else f"{b.value:.3g}" if b.unit in ("x", "x time") else f"{b.value:.1f}"
        op = ">=" if b.higher_is_better else "<="
        line = f"  {b.part:<8} {b.name:<{width}} {value:>8} {b.unit:<7} {op} {b.target:<6g} {b.verdict}{'*' if b.stretch else ' '}"
        print(line + (f"  {b.note}" if b.note else ""), file=out)
    judged = [b for b in bars if not b.stretch and b.value is not None]
    passed = sum(b.verdict == "PASS" for b in judged)
    print(f"  {passed}/{len(judged)} bars pass (stretch bars and n/a not counted)", file=out)
