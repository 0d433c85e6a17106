# bench/report.py: what the benchmark prints and writes.
#
# The environment stored with the results, the TFLOP/s tables with our ratios over PyTorch's
# backends (medians over interleaved rounds: rounds.py), the memory and overhead reports,
# results.csv / results.json and tflops.png.
"""Tables, ratios, result files and the plot of the benchmark."""

from __future__ import annotations

import csv
import datetime
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from flashsdpa.bench.problems import BACKENDS, FA4, MEMORY_SEQLEN, Result
from flashsdpa.bench.rounds import counts, ratios
from flashsdpa.info import collect_info

__all__ = ["counts", "environment", "plot", "print_memory", "print_overhead", "print_table", "ratios", "write_files"]


def environment() -> dict[str, Any]:
    info = collect_info()
    info["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return info


def _fmt(value: float | None, width: int = 7, digits: int = 1) -> str:
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


def _ratio(value: float | None) -> str:
    return f"{value:7.2f}x" if value is not None else f"{'-':>8}"


def _cell(result: Result | None) -> str:
    if result is None:
        return f"{'':>8}"
    if result.tflops is None:
        return f"{'n/a' if result.status.startswith('unsupported') else result.status[:8]:>8}"
    mark = "" if result.status == "ok" else ("!" if result.status == "WRONG" else "?")
    return f"{result.tflops:7.1f}{mark or ' '}"


def print_table(
    results: Sequence[Result],
    backends: Sequence[str],
    out: Any = None,
    anchors: dict[tuple[int, int, bool], dict[str, float]] | None = None,
) -> None:
    out = out or sys.stdout  # bound at call time: pytest and callers may swap sys.stdout
    if not results:  # a run of other parts only
        return
    ratio_rows = {(r["direction"], r["head_dim"], r["seqlen"], r["causal"]): r for r in ratios(results, anchors)}
    by_key = {(r.direction, r.head_dim, r.seqlen, r.causal, r.backend): r for r in results}
    panels = sorted({(r.direction, r.head_dim, r.causal) for r in results}, key=lambda p: (p[0] != "fwd", p[1], p[2]))
    names = {
        "flashsdpa": "ours",
        "flashsdpa-sdpa": "ours-sdpa",
        "torch-flash": "flash",
        "torch-cudnn": "cudnn",
        "torch-efficient": "effic.",
        "torch-default": "default",
        FA4: "fa4",
    }
    n_rounds = max([len(r.round_ms) for r in results] + [1])
    print(
        f"\nTFLOP/s, median of {n_rounds} interleaved round(s); ratios are medians of per-round ratios of ours "
        "(direct API)\n(! = failed the correctness check, ? = not what the label says; n/a = unsupported; "
        "fa4 anchor = FA4's value from anchors.py, not measured here)",
        file=out,
    )
    for direction, d, causal in panels:
        print(f"\n{direction} D={d} {'causal' if causal else 'non-causal'}", file=out)
        header = (
            f"{'S':>6} "
            + " ".join(f"{names.get(b, b)[:8]:>8}" for b in backends)
            + f" {'fa4 anc.':>8}    /flash   /cudnn    /best /cudnn|fa4"
        )
        print(header, file=out)
        for s in sorted({r.seqlen for r in results if (r.direction, r.head_dim, r.causal) == (direction, d, causal)}):
            cells = " ".join(_cell(by_key.get((direction, d, s, causal, b))) for b in backends)
            rr = ratio_rows.get((direction, d, s, causal), {})
            anchor = rr.get("fa4_anchor_tflops") if rr.get("fa4_source") == "anchor" else None
            ratio_cells = " ".join(
                _ratio(rr.get(k)) for k in ("ours_over_flash", "ours_over_cudnn", "ours_over_best", "ours_over_cudnn_fa4")
            )
            print(f"{s:>6} {cells} {_fmt(anchor, 8)}  {ratio_cells}", file=out)


def print_memory(rows: Sequence[dict[str, Any]]) -> None:
    if not rows:
        return
    print(f"\nPeak extra memory above the inputs (MiB), S = {MEMORY_SEQLEN}, non-causal")
    print(f"{'D':>4} {'backend':<16} {'fwd':>9} {'fwd+bwd':>9}  status")
    for r in rows:
        print(
            f"{r['head_dim']:>4} {r['backend']:<16} {_fmt(r['fwd_mib'], 9)} {_fmt(r['fwd_bwd_mib'], 9)}  {r['status']}"
        )
    for verdict in memory_verdicts(rows):
        print(verdict)


def memory_verdicts(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Per head dim: flashsdpa's peak against PyTorch's flash backend's (the bar: no more)."""
    by_dim: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_dim.setdefault(r["head_dim"], {})[r["backend"]] = r
    lines = []
    for d, row in sorted(by_dim.items()):
        ours, flash = row.get("flashsdpa"), row.get("torch-flash")
        if not ours or not flash or ours["fwd_bwd_mib"] is None or flash["fwd_bwd_mib"] is None:
            continue
        worst = max(ours["fwd_mib"] - flash["fwd_mib"], ours["fwd_bwd_mib"] - flash["fwd_bwd_mib"])
        verdict = "within" if worst <= 0 else f"OVER by {worst:.1f} MiB"
        lines.append(f"  D={d}: flashsdpa vs PyTorch's flash: {verdict} (bar: no more than flash)")
    return lines


def print_overhead(o: dict[str, Any] | None) -> None:
    if not o:
        return
    print(
        f"\nPer-call wall time on a tiny shape {tuple(o['shape'])} {o['dtype']}, median of {o['rounds']} "
        "interleaved rounds (us)"
    )
    columns = (("no grad", "us_per_call"), ("equal", "equal_us_per_call"), ("grad fwd", "grad_us_per_call"),
               ("step", "step_us_per_call"), ("bwd", "bwd_us_per_call"))  # fmt: skip
    print(f"  {'':<16} " + " ".join(f"{label:>8}" for label, _ in columns))
    for name in o["us_per_call"]:
        cells = " ".join(_fmt(o.get(field, {}).get(name), 8) for _, field in columns)
        roads = ("", " (aten)", " (grad)", " (step)")
        notes = "  ".join(o["status"][name + r] for r in roads if name + r in o["status"])
        print(f"  {name:<16} {cells}  {notes}".rstrip())
    overheads = ("shim_overhead_us", "equal_shim_overhead_us", "grad_shim_overhead_us", "step_shim_overhead_us",
                 "bwd_shim_overhead_us")  # fmt: skip
    print(f"  {'shim overhead':<16} " + " ".join(_fmt(o.get(field), 8) for field in overheads)
          + "  (medians of per-round differences)")  # fmt: skip
    print("  (no grad: F.sdpa, where our eager path skips the LSE PyTorch's flash writes, so not equal work; "
          "equal: the aten flash op, both writing it; grad fwd: inputs that require grad, through autograd and "
          "the routers; step: forward + backward, the headline; bwd: step - grad fwd)")  # fmt: skip
    unserved = o.get("unserved_step_us_per_call")
    if unserved:
        alone, inside = _fmt(unserved.get("torch-default"), 0), _fmt(unserved.get("flashsdpa-sdpa"), 0)
        extra = _fmt(o.get("unserved_step_overhead_us"), 0)
        print(f"  unserved step (float32 fwd + bwd, PyTorch's kernels on both sides): PyTorch alone {alone}, "
              f"inside enable() {inside}, overhead {extra}")
    attention = o.get("attention_step_us_per_step")
    if attention:
        shape = "x".join(str(n) for n in o.get("attention_step_shape", ()))
        cells = ", ".join(f"{name} {_fmt(us, 0)}" for name, us in attention.items())
        print(f"  attention step ({shape} causal, fwd + bwd, us a step): {cells}; ours - FA2 only "
              f"{_fmt(o.get('attention_step_vs_flash_us'), 0)}, ours - cuDNN only {_fmt(o.get('attention_step_vs_cudnn_us'), 0)}")
    bars = o.get("bars_us", {})
    if bars:
        served = {k: v for k, v in bars.items() if not k.startswith("unserved")}
        print("  bars: " + ", ".join(f"{k} <= {v:g} us" for k, v in served.items()) + " over PyTorch's flash"
              + "".join(f"; {k} <= {v:g} us over PyTorch alone" for k, v in bars.items() if k not in served))


def _csv_value(value: Any) -> Any:
    """Per-round lists as space-separated numbers (one CSV cell, easy to split)."""
    if isinstance(value, list):
        return " ".join("-" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v) for v in value)
    return value


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as f:
        fields: list[str] = []
        for row in rows:
            fields += [k for k in row if k not in fields]
        writer = csv.DictWriter(f, fieldnames=fields or ["backend"])
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _csv_value(v) for k, v in row.items()})
    return path


def write_files(
    out_dir: Path,
    results: Sequence[Result],
    payload: dict[str, Any],
    tables: dict[str, Sequence[dict[str, Any]]] | None = None,
) -> list[Path]:
    """results.csv (the sweep's rows), one CSV per extra table (models.csv, decode.csv, bars.csv)
    and results.json (everything)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    if results:
        written.append(write_csv(out_dir / "results.csv", [asdict(r) for r in results]))
    for name, rows in (tables or {}).items():
        if rows:
            written.append(write_csv(out_dir / f"{name}.csv", rows))
    json_path = out_dir / "results.json"
    json_path.write_text(json.dumps(payload, indent=1, default=str))
    written.append(json_path)
    return written


def plot(results: Sequence[Result], path: Path) -> str:
    """TFLOP/s against sequence length, one panel per head dim x causality; fwd solid, bwd dashed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot (pip install matplotlib)"
    head_dims = sorted({r.head_dim for r in results})
    causals = sorted({r.causal for r in results})
    fig, axes = plt.subplots(
        len(head_dims), len(causals), figsize=(6 * len(causals), 4 * len(head_dims)), squeeze=False
    )
    colors = {b: f"C{i}" for i, b in enumerate(BACKENDS)}  # C0-C6: one colour per backend
    for i, d in enumerate(head_dims):
        for j, causal in enumerate(causals):
            ax = axes[i][j]
            for backend in BACKENDS:
                for direction, style in (("fwd", "-"), ("bwd", "--")):
                    pts = sorted(
                        (r.seqlen, r.tflops)
                        for r in results
                        if (r.head_dim, r.causal, r.backend, r.direction) == (d, causal, backend, direction)
                        and counts(r)
                    )
                    if pts:
                        ax.plot(
                            *zip(*pts), style, marker="o", ms=3, color=colors[backend], label=f"{backend} {direction}"
                        )
            ax.set_xscale("log", base=2)
            seqlens = sorted({r.seqlen for r in results})
            ax.set_xticks(seqlens, [f"{s // 1024}k" if s % 1024 == 0 else str(s) for s in seqlens])
            ax.set_ylim(bottom=0)
            ax.set_title(f"D={d}, {'causal' if causal else 'non-causal'}")
            ax.set_xlabel("sequence length")
            ax.set_ylabel("TFLOP/s")
            ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(5, len(labels)), fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot: {path}"
