# bench/rounds.py: interleaved rounds, their medians and the per-round ratios.
#
# A ratio bar is judged on the median of at least three interleaved rounds in one process: each
# round times every backend of every configuration once, so clock and thermal drift hit all
# backends of a round alike, and a ratio is taken inside one round (ours and theirs measured
# seconds apart) before the median over rounds. The median of per-round ratios is not the ratio of
# the medians; the bars use the former, the tables print both sides' median times. Pure logic on
# Result rows, so the CPU tests drive it with fake timings.
"""Merging per-round measurements and the per-round ratios of the benchmark."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeVar

from flashsdpa.bench.anchors import fa4_anchor
from flashsdpa.bench.problems import FA4, TORCH_ALL, Problem, Result

T = TypeVar("T")

Key = tuple[str, int, int, bool]  # direction, head_dim, seqlen, causal


def rotated(names: Sequence[str], round_index: int) -> list[str]:
    """The backends in round ``round_index``'s order: rotated by one each round, so no backend
    always runs first after new inputs (or right after the slowest one)."""
    if not names:
        return []
    shift = round_index % len(names)
    return [*names[shift:], *names[:shift]]


def spread(items: Sequence[T], round_index: int, rounds: int) -> list[T]:
    """The sweep's problems in round ``round_index``'s order: rotated by a ``rounds``-th of the list
    each round, so that over the rounds each problem runs early, midway and late. A long sweep
    heats the card: in session 20 the quick sweep's last cells ran at 578-595 W with the SM clock at
    1785-1830 MHz against 1965-1980 for the same cell alone (its causal 8k forward: 612 TFLOP/s in
    the sweep, 676 alone), so a fixed order reads the last cells at a lower clock in every round."""
    if not items or rounds < 2:
        return list(items)
    shift = (round_index * len(items) // rounds) % len(items)
    return [*items[shift:], *items[:shift]]


def median(values: Sequence[float | None]) -> float | None:
    """Median of the values that exist; None if none do."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _worst_status(statuses: Sequence[str]) -> str:
    """The status a merged row carries: a failed check anywhere beats every other status, then a
    mislabelled run or an error, then anything not ok (an OOM in one round keeps the row from
    scoring: its median would be over fewer rounds than the others')."""
    for prefix in ("WRONG", "not served", "error", "OOM", "unsupported"):
        for s in statuses:
            if s.startswith(prefix):
                return s
    return next((s for s in statuses if s != "ok"), "ok")


def merge_rounds(rounds: Sequence[Result]) -> Result:
    """One row from the rounds of one (direction, configuration, backend): median time, the
    TFLOP/s of that median, the check of whichever round was checked, every round's values."""
    first = rounds[0]
    problem = Problem(first.head_dim, first.seqlen, first.causal, first.batch, first.heads)
    round_ms = [r.ms for r in rounds]
    ms = median(round_ms)
    checked = next((r for r in rounds if r.err_ratio is not None), first)
    return replace(
        first,
        ms=ms,
        tflops=problem.flops(first.direction) / (ms * 1e-3) / 1e12 if ms else None,
        max_err=checked.max_err,
        err_ratio=checked.err_ratio,
        status=_worst_status([r.status for r in rounds]),
        round_ms=round_ms,
        round_tflops=[r.tflops for r in rounds],
    )


def merge(per_round: dict[tuple[Key, str], list[Result]]) -> list[Result]:
    """Merged rows, in the order the keys were first measured."""
    return [merge_rounds(rows) for rows in per_round.values() if rows]


def counts(r: Result | None) -> bool:
    """Whether a row's TFLOP/s stand: ours only when checked correct and served as labelled;
    theirs whenever they ran (counting them even past the rule's bound keeps our ratios
    conservative: the check is there to catch our kernels, not to discount theirs)."""
    if r is None or r.tflops is None:
        return False
    return r.status == "ok" or (r.backend not in ("flashsdpa", "flashsdpa-sdpa") and r.status == "WRONG")


def _per_round(r: Result | None, n: int) -> list[float | None]:
    """A counting row's TFLOP/s in each of ``n`` rounds (a row measured once fills round 0)."""
    if not counts(r):
        return [None] * n
    assert r is not None
    values = list(r.round_tflops) if r.round_tflops else [r.tflops]
    return (values + [None] * n)[:n]


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def ratios(
    results: Sequence[Result], anchors: dict[tuple[int, int, bool], dict[str, float]] | None = None
) -> list[dict[str, Any]]:
    """Per configuration: ours (direct API) over flash, cuDNN, the best PyTorch backend, and the
    best of cuDNN and FA4, each the median over rounds of that round's ratio, with the per-round
    ratios beside it. FA4 is the measured row where there is one, else its anchor value (a
    constant, labelled as such in ``fa4_source``)."""
    by_key: dict[Key, dict[str, Result]] = {}
    for r in results:
        by_key.setdefault((r.direction, r.head_dim, r.seqlen, r.causal), {})[r.backend] = r
    rows = []
    for (direction, d, s, causal), row in by_key.items():
        n = max([len(r.round_tflops) for r in row.values()] + [1])
        mine = _per_round(row.get("flashsdpa"), n)
        theirs = {name: _per_round(row.get(name), n) for name in (*TORCH_ALL, FA4)}
        anchor = fa4_anchor(direction, d, s, causal, anchors)
        fa4_measured = any(v is not None for v in theirs[FA4])
        fa4 = theirs[FA4] if fa4_measured else [anchor] * n
        per_round: dict[str, list[float | None]] = {"flash": [], "cudnn": [], "best": [], "cudnn_fa4": []}
        for i in range(n):
            best = max((v for v in (theirs[name][i] for name in TORCH_ALL) if v is not None), default=None)
            cudnn = theirs["torch-cudnn"][i]
            best_cf = max((v for v in (cudnn, fa4[i]) if v is not None), default=None)
            per_round["flash"].append(_ratio(mine[i], theirs["torch-flash"][i]))
            per_round["cudnn"].append(_ratio(mine[i], cudnn))
            per_round["best"].append(_ratio(mine[i], best))
            # With cuDNN missing in a round the anchor alone would judge that round: leave it out.
            per_round["cudnn_fa4"].append(_ratio(mine[i], best_cf) if cudnn is not None or fa4_measured else None)
        entry: dict[str, Any] = {"direction": direction, "head_dim": d, "seqlen": s, "causal": causal, "rounds": n}
        for name, values in per_round.items():
            entry[f"ours_over_{name}"] = median(values)
            entry[f"ours_over_{name}_rounds"] = values
        entry["fa4_source"] = "measured" if fa4_measured else ("anchor" if anchor is not None else None)
        entry["fa4_anchor_tflops"] = anchor
        rows.append(entry)
    return rows


def ratio_over_rounds(
    mine: Sequence[float | None], theirs: Sequence[float | None]
) -> tuple[float | None, list[float | None]]:
    """(median over rounds, per-round values) of mine[i] / theirs[i], for times or rates measured
    in the same rounds; rounds where either is missing are left out of the median."""
    per_round = [_ratio(a, b) for a, b in zip(mine, theirs)]
    return median(per_round), per_round
