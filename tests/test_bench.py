# test_bench.py: the benchmark's logic on CPU with fake timings: interleaved rounds, medians of
# per-round ratios, FA4 anchors, the bars (value, target, PASS/FAIL), the model and decode
# summaries; and the whole GPU path (sweep, memory, models, decode, files, bars) driven on CPU
# through tiny shapes with fake CUDA events, so a crash shows here and not on the scarce GPU.
from __future__ import annotations

import argparse
import contextlib
import json
import time
import types
from collections import Counter
from pathlib import Path

import pytest
import torch

from flashsdpa import cli
from flashsdpa.bench import bars, decode, deterministic, features, gpu, masked, models, problems, rounds, window
from flashsdpa.bench.problems import Problem, Result


def _row(backend: str, round_ms: list[float | None], d: int = 128, s: int = 8192, causal: bool = False,
         direction: str = "fwd", status: str = "ok") -> Result:
    """A merged row as the sweep makes it, from fake per-round times."""
    p = Problem(d, s, causal, max(1, 16384 // s), 2048 // d)
    per_round = [
        Result(direction, d, s, causal, p.batch, p.heads, backend, ms=ms,
               tflops=p.flops(direction) / (ms * 1e-3) / 1e12 if ms else None, status=status)
        for ms in round_ms
    ]
    return rounds.merge_rounds(per_round)


def test_rotated_order_changes_each_round() -> None:
    names = ["a", "b", "c"]
    assert [rounds.rotated(names, i) for i in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert rounds.rotated([], 2) == []


def test_spread_runs_each_problem_early_midway_and_late() -> None:
    items = list("abcdef")
    orders = [rounds.spread(items, r, 3) for r in range(3)]
    assert orders == [list("abcdef"), list("cdefab"), list("efabcd")]
    # Over the rounds every item takes a different third of the order; round 0 is the list itself
    # (its correctness checks see every problem first there).
    for item in items:
        thirds = sorted(order.index(item) * 3 // len(items) for order in orders)
        assert thirds == [0, 1, 2], (item, thirds)
    assert rounds.spread(items, 5, 1) == items and rounds.spread([], 1, 3) == []


def test_merge_takes_the_median_and_keeps_every_round() -> None:
    r = _row("flashsdpa", [1.0, 3.0, 2.0])
    assert r.ms == 2.0 and r.round_ms == [1.0, 3.0, 2.0] and len(r.round_tflops) == 3
    assert r.tflops == pytest.approx(Problem(128, 8192, False, 2, 16).flops("fwd") / 2e-3 / 1e12)
    # A round that did not run is left out of the median; a status not ok anywhere sticks.
    partial = rounds.merge_rounds([Result("fwd", 128, 8192, False, 2, 16, "x", ms=1.0, tflops=1.0),
                                   Result("fwd", 128, 8192, False, 2, 16, "x", status="OOM")])
    assert partial.ms == 1.0 and partial.status == "OOM" and partial.round_ms == [1.0, None]


def test_ratio_bars_use_the_median_of_per_round_ratios() -> None:
    # Per-round ours/cuDNN speed ratios: 1.1, 0.833, 1.111 -> median 1.1; the ratio of the median
    # times would be 1.0.
    results = [_row("flashsdpa", [1.0, 1.2, 0.9]), _row("torch-cudnn", [1.1, 1.0, 1.0]),
               _row("torch-flash", [2.0, 2.0, 2.0])]
    (row,) = rounds.ratios(results)
    assert row["ours_over_cudnn"] == pytest.approx(1.1)
    assert row["ours_over_cudnn_rounds"] == pytest.approx([1.1, 1.0 / 1.2, 1.0 / 0.9])
    assert row["ours_over_best"] == pytest.approx(1.1) and row["ours_over_flash"] == pytest.approx(2.0)
    assert row["rounds"] == 3


def test_fa4_anchor_stands_in_only_where_fa4_was_not_measured() -> None:
    p = Problem(64, 8192, False, 2, 32)
    ms_at = lambda tflops: p.flops("fwd") / (tflops * 1e12) * 1e3  # noqa: E731
    ours, cudnn = _row("flashsdpa", [ms_at(500.0)] * 3, d=64), _row("torch-cudnn", [ms_at(480.0)] * 3, d=64)
    (row,) = rounds.ratios([ours, cudnn])
    assert row["fa4_source"] == "anchor" and row["fa4_anchor_tflops"] == 553.7
    assert row["ours_over_cudnn_fa4"] == pytest.approx(500.0 / 553.7)
    fa4 = _row("fa4", [ms_at(400.0)] * 3, d=64)
    (row,) = rounds.ratios([ours, cudnn, fa4])
    assert row["fa4_source"] == "measured" and row["ours_over_cudnn_fa4"] == pytest.approx(500.0 / 480.0)
    # A wrong kernel of ours never scores.
    (row,) = rounds.ratios([_row("flashsdpa", [1.0], d=64, status="WRONG"), cudnn])
    assert row["ours_over_cudnn"] is None


def _at(tflops: float, backend: str, d: int, s: int, causal: bool, direction: str = "fwd") -> Result:
    p = Problem(d, s, causal, max(1, 16384 // s), 2048 // d)
    return _row(backend, [p.flops(direction) / (tflops * 1e12) * 1e3] * 3, d, s, causal, direction)


def test_sweep_bars_value_target_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    results = [
        _at(730.0, "flashsdpa", 128, 8192, False), _at(600.0, "torch-cudnn", 128, 8192, False),
        _at(600.0, "flashsdpa", 128, 8192, True), _at(610.0, "torch-cudnn", 128, 8192, True),
        _at(300.0, "flashsdpa", 128, 512, False), _at(280.0, "torch-cudnn", 128, 512, False),
        _at(640.0, "flashsdpa", 128, 8192, False, "bwd"), _at(500.0, "torch-cudnn", 128, 8192, False, "bwd"),
        _at(100.0, "flashsdpa", 128, 512, False, "bwd"), _at(200.0, "torch-cudnn", 128, 512, False, "bwd"),
    ]
    found = {b.name: b for b in bars.sweep_bars(results)}
    assert found["fwd D128 8k non-causal"].verdict == "PASS" and found["fwd D128 8k non-causal"].target == 720
    assert found["fwd D128 8k causal"].verdict == "FAIL"
    cells = found["fwd D128 every cell S>=512 vs cuDNN"]
    assert cells.value == pytest.approx(600 / 610) and cells.verdict == "FAIL" and "worst S=8192 causal" in cells.note
    assert "2/3 cells pass" in cells.note
    # The backward's cells start at 1k: S = 512 (0.5x) does not count.
    assert found["bwd D128 every cell S>=1024 vs cuDNN"].verdict == "PASS"
    assert found["bwd D128 8k non-causal"].verdict == "PASS"
    assert "bwd D128 8k causal" not in found  # not measured: left out, not failed
    assert "fwd D512 8k non-causal" not in found  # judged only where the sweep has D 512
    wide = {b.name: b for b in bars.sweep_bars([_at(520.0, "flashsdpa", 512, 8192, False)])}
    assert wide["fwd D512 8k non-causal"].target == 600 and wide["fwd D512 8k non-causal"].verdict == "FAIL"
    stretch = found["fwd every cell vs best of cuDNN, FA4"]
    assert stretch.stretch and stretch.target == 1.05
    bars.print_bars(list(found.values()))
    out = capsys.readouterr().out
    assert "PASS" in out and "FAIL" in out and "bars pass" in out.splitlines()[-1]


def test_model_and_decode_bars() -> None:
    rows = [
        {"case": "train B1x8k", "variant": v, "ms": ms[1], "round_ms": ms, "status": "ok"}
        for v, ms in (("enable", [70.0, 72.0, 71.0]), ("default", [73.0, 73.0, 70.0]), ("fa2", [80.0] * 3))
    ]
    (ratio,) = models.model_ratios(rows)
    assert ratio["enable_over_default"] == pytest.approx(72.0 / 73.0) and ratio["enable_ms"] == 72.0
    assert "enable_over_cudnn" not in ratio
    found = {b.name: b for b in bars.model_bars([ratio])}
    assert found["train B1x8k: enable() / default"].verdict == "PASS"
    assert found["train B1x8k: enable() ms"].stretch and found["train B1x8k: enable() ms"].verdict == "FAIL"
    rows[0]["status"] = "not served: PyTorch's kernels ran inside enable()"
    assert models.model_ratios(rows)[0].get("enable_over_default") is None

    drows = [
        {"batch": 1, "keys": 131072, "backend": b, "us": us[0], "tbps": None, "status": "ok", "round_us": us}
        for b, us in (("flashsdpa", [140.0, 130.0]), ("torch-cudnn", [145.0, 150.0]), ("torch-flash", [170.0] * 2))
    ]
    (summary,) = decode.decode_summary(drows)
    assert summary["fastest"] == "torch-cudnn" and summary["ours_over_fastest"] == pytest.approx((140 / 145 + 130 / 150) / 2)
    found = {b.name: b for b in bars.decode_bars([{**summary, "ours_tbps": 3.95}])}
    assert found["decode B1 x 128k keys: ours TB/s"].verdict == "PASS"
    assert found["decode B1 x 128k keys: ours / fastest PyTorch"].verdict == "PASS"
    # The kvcache rows are ours (never PyTorch's fastest), and the paged one is judged against the
    # contiguous one, per round (issue 11: within 5%).
    drows += [
        {"batch": 1, "keys": 131072, "backend": b, "us": us[0], "tbps": None, "status": "ok", "round_us": us}
        for b, us in ((decode.KVCACHE, [100.0, 100.0]), (decode.PAGED, [104.0, 107.0]))
    ]
    (summary,) = decode.decode_summary(drows)
    assert summary["fastest"] == "torch-cudnn"
    assert summary["paged_over_contiguous"] == pytest.approx((1.04 + 1.07) / 2)
    found = {b.name: b for b in bars.decode_bars([summary])}
    assert found["decode B1 x 128k keys: paged cache / contiguous"].verdict == "FAIL"  # 1.055 > 1.05
    drows[-1]["status"] = "error: something"
    (summary,) = decode.decode_summary(drows)
    assert summary["paged_over_contiguous"] is None  # a failed row gives no ratio, never a made-up one


def test_masked_bars() -> None:
    summary = [
        {"case": "key padding S 2k", "direction": "fwd", "ours_tflops": 610.0, "ours_over_best_torch": 1.4},
        {"case": "key padding S 2k", "direction": "bwd", "ours_tflops": 400.0, "ours_over_best_torch": 0.97},
        {"case": "additive bias S 2k", "direction": "bwd", "ours_tflops": None, "ours_over_best_torch": None},
    ]
    found = {b.name: b for b in bars.masked_bars(summary)}
    assert found["key padding S 2k fwd: ours TFLOP/s"].verdict == "PASS"
    assert found["key padding S 2k bwd: ours TFLOP/s"].target == 450.0
    assert found["key padding S 2k bwd: ours TFLOP/s"].verdict == "FAIL"
    assert found["key padding S 2k bwd: ours / best PyTorch"].verdict == "FAIL"
    assert found["additive bias S 2k bwd: ours TFLOP/s"].verdict == "n/a"
    assert found["additive bias S 2k bwd: ours TFLOP/s"].target == 300.0


def test_features_bars() -> None:
    summary = [
        {"case": features.DROPOUT_NAME, "direction": "fwd", "ours_tflops": 600.0, "ratio": 1.6},
        {"case": features.DROPOUT_NAME, "direction": "bwd", "ours_tflops": 440.0, "ratio": 1.05},
        {"case": features.SOFTCAP_NAME, "direction": "fwd", "ours_tflops": 500.0, "ratio": 0.7},
        {"case": features.SOFTCAP_NAME, "direction": "bwd", "ours_tflops": None, "ratio": None},
    ]
    found = {b.name: b for b in bars.features_bars(summary)}
    assert len(found) == 6 and all(b.part == "features" for b in found.values())
    assert found["dropout 0.1 S 4k fwd: ours TFLOP/s"].verdict == "PASS"
    assert found["dropout 0.1 S 4k bwd: ours TFLOP/s"].target == 450.0
    assert found["dropout 0.1 S 4k bwd: ours TFLOP/s"].verdict == "FAIL"
    assert found["dropout 0.1 S 4k bwd: ours / best PyTorch"].verdict == "PASS"
    assert found["softcap 50 S 8k fwd: softcap / plain rate"].target == bars.SOFTCAP_MIN_RATIO == 0.9
    assert found["softcap 50 S 8k fwd: softcap / plain rate"].verdict == "FAIL"
    assert found["softcap 50 S 8k bwd: softcap / plain rate"].verdict == "n/a"


def test_deterministic_bar_is_the_worst_case() -> None:
    rows = [{"case": "a", "ratio": 1.05}, {"case": "b", "ratio": 1.2}, {"case": "c", "ratio": None}]
    (bar,) = bars.deterministic_bars(rows)
    assert bar.value == 1.2 and bar.target == bars.DETERMINISTIC_MAX_RATIO and bar.verdict == "FAIL"
    assert bar.note == "worst b; 1/2 cases pass; 1 case(s) not measured"
    (bar,) = bars.deterministic_bars(rows[:1])
    assert bar.verdict == "PASS"
    (bar,) = bars.deterministic_bars(rows[2:])
    assert bar.verdict == "n/a"
    assert bars.deterministic_bars([]) == []


def test_deterministic_rows_differing_bitwise_are_wrong(fake_cuda: None, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A deterministic mode whose repeat differs is a wrong kernel: the row says so and the run exits 1."""
    calls = iter(range(1000))

    def backward(case: object, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor) -> object:
        return lambda: (torch.full_like(q, float(next(calls))), k, v)

    monkeypatch.setattr(deterministic, "_backward", backward)
    rc = cli.main(["bench", "--deterministic", "--rounds", "2", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    payload = json.loads((tmp_path / "results.json").read_text())
    rows = payload["deterministic"]["rows"]
    assert rc == 1 and all(r["status"].startswith("WRONG") and r["bitwise"] is False for r in rows), rows
    assert all(r["ratio"] is None for r in rows) and "two deterministic backwards differ" in captured.err


def test_parts_selection() -> None:
    ns = types.SimpleNamespace
    none = {"sweep": False, "models": False, "decode": False, "window": False, "masks": False, "deterministic": False,
            "features": False}
    assert gpu.selected_parts(ns(quick=False, **none)) == ["sweep", "models", "decode", "window", "masks",
                                                            "deterministic", "features"]
    assert gpu.selected_parts(ns(quick=False, **{**none, "features": True})) == ["features"]
    assert gpu.selected_parts(ns(quick=False, **{**none, "deterministic": True})) == ["deterministic"]
    assert gpu.selected_parts(ns(quick=True, **none)) == ["sweep"]
    assert gpu.selected_parts(ns(quick=False, **{**none, "window": True})) == ["window"]
    assert gpu.selected_parts(ns(quick=False, **{**none, "masks": True})) == ["masks"]
    assert gpu.selected_parts(ns(quick=True, sweep=False, models=True, decode=True)) == ["models", "decode"]


class _FakeEvent:
    def __init__(self, enable_timing: bool = False) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, other: _FakeEvent) -> float:
        return (other.t - self.t) * 1e3


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU path on CPU: tensors on the CPU, CUDA events from the wall clock, tiny shapes."""
    if torch.cuda.is_available():
        pytest.skip("a real GPU is here: the fake would hide it")
    monkeypatch.setattr(problems, "DEVICE", "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    for name in ("synchronize", "empty_cache", "reset_peak_memory_stats"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, **k: None)
    for name in ("memory_allocated", "max_memory_allocated", "current_device"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, **k: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: types.SimpleNamespace(L2_cache_size=1 << 16))
    monkeypatch.setattr(gpu, "environment", lambda: {"gpus": [{"name": "fake", "sms": 1}], "torch": {"cudnn": None},
                                                     "flashsdpa": "test"})
    import flashsdpa
    from flashsdpa import activation

    monkeypatch.setattr(flashsdpa, "explain", lambda *a, **k: [])
    # A CUDA build of _C (CI's machine has nvcc) makes enable() warm SDPA's priority order with a
    # real CUDA tensor; there is no GPU behind the fake.
    monkeypatch.setattr(activation, "_warm_priority", lambda: None)
    monkeypatch.setattr(gpu, "MEMORY_SEQLEN", 64)
    monkeypatch.setattr(decode, "DECODE_SHAPES", ((1, 64), (2, 32)))
    monkeypatch.setattr(decode, "DECODE_REPS", 3)
    monkeypatch.setattr(window, "WINDOW_SHAPE", (1, 2, 64, 16))
    monkeypatch.setattr(window, "WINDOW_KEYS", 16)
    monkeypatch.setattr(window, "MASKS", (("causal", None), ("window", (15, 0))))
    monkeypatch.setattr(deterministic, "CASES", (deterministic.DetCase(2, 2, 2, 48, 16, False),
                                                 deterministic.DetCase(1, 4, 2, 64, 16, True)))
    monkeypatch.setattr(deterministic, "DET_REPS", 2)
    monkeypatch.setattr(masked, "TOKENS", 64)
    monkeypatch.setattr(masked, "HEADS", 2)
    monkeypatch.setattr(masked, "HEAD_DIM", 16)
    monkeypatch.setattr(masked, "MASKED_REPS", 2)
    monkeypatch.setattr(masked, "DECODE_BATCH", 2)
    monkeypatch.setattr(masked, "DECODE_HEADS", 2)
    monkeypatch.setattr(masked, "DECODE_KEYS", 64)
    monkeypatch.setattr(masked, "CASES", (masked.MaskCase("key padding S 2k", "padding", 32),
                                          masked.MaskCase("additive bias S 2k", "bias", 32)))
    monkeypatch.setattr(features, "DROPOUT_SHAPE", (1, 2, 32, 16))
    monkeypatch.setattr(features, "SOFTCAP_SHAPE", (1, 2, 32, 16))
    monkeypatch.setattr(features, "FEATURE_REPS", 2)
    tiny = models.DecoderShape(hidden=32, layers=2, heads=4, kv_heads=2, intermediate=48, vocab=64)
    monkeypatch.setattr(models, "MODELS", {k: (tiny, dt) for k, (_, dt) in models.MODELS.items()})
    monkeypatch.setattr(models, "CASES", tuple(
        models.Case(c.name, c.kind, c.model, c.batch, 16, 2, c.variants) for c in models.CASES))


def test_whole_gpu_path_on_fake_cuda(fake_cuda: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["bench", "--head-dims", "16", "--seqlens", "32", "64", "--tokens", "128", "--hidden", "32",
                   "--rounds", "2", "--reps", "2", "--warmup", "1", "--no-overhead", "--no-plot",
                   "--model-impl", "torch", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    # On CPU, SDPA inside enable() is PyTorch's own (not served): exit 1, never 4 (no part raised).
    assert rc in (0, 1), captured.err[-3000:]
    assert "FAILED parts" not in captured.out, captured.out[-3000:]
    payload = json.loads((tmp_path / "results.json").read_text())
    assert payload["failed_parts"] == {} and payload["parts"] == ["sweep", "models", "decode", "window", "masks",
                                                                  "deterministic", "features"]
    flash = [r for r in payload["results"] if r["backend"] == "torch-flash"]
    assert flash and all(len(r["round_ms"]) == 2 for r in flash)
    assert all(len(r["ours_over_flash_rounds"]) == 2 for r in payload["ratios"])
    assert {r["case"] for r in payload["models"]["rows"]} == {c.name for c in models.CASES}
    assert payload["models"]["impl"] == "torch-llama"
    assert all(r["ms"] is not None for r in payload["models"]["rows"] if r["variant"] in ("enable", "default", "fa2"))
    assert {(r["batch"], r["keys"]) for r in payload["decode"]["rows"]} == {(1, 64), (2, 32)}
    # The kvcache rows run (the CPU reference here) and check against the same reference: the paged
    # cache's shuffled pages hold the contiguous cache's keys (2 x 32 keys: a half-used page each).
    kv_rows = [r for r in payload["decode"]["rows"] if r["backend"] in (decode.KVCACHE, decode.PAGED)]
    assert len(kv_rows) == 4 and all(r["status"] == "ok" and r["us"] for r in kv_rows), kv_rows
    assert all(s["paged_over_contiguous"] for s in payload["decode"]["summary"])
    for name in ("results.csv", "models.csv", "decode.csv", "bars.csv"):
        assert (tmp_path / name).stat().st_size > 0
    assert captured.out.rstrip().splitlines()[-1].lstrip().endswith("(stretch bars and n/a not counted)")
    assert "Models (torch-llama" in captured.out and "Decode: one query token" in captured.out
    assert "Sliding window:" in captured.out and payload["window"]["summary"]["fwd"]["window_over_causal"]
    # On CPU nothing of ours serves SDPA, so "ours" is n/a (never a PyTorch time under our label).
    assert "Masks through SDPA:" in captured.out
    ours = [r for r in payload["masks"]["rows"] if r["backend"] == "ours"]
    assert len(ours) == 4 and all(r["tflops"] is None for r in ours)
    assert any(r["tflops"] for r in payload["masks"]["rows"] if r["backend"] == "torch-default")
    decode_rows = {r["backend"]: r for r in payload["masks"]["decode"]["rows"]}
    assert decode_rows["ours"]["us"] is None and decode_rows["torch-default"]["us"] > 0  # ours n/a on CPU
    assert masked.DECODE_NAME in captured.out
    # The deterministic rows: both modes timed in each round, the repeat bitwise equal (the CPU
    # reference path here), the bar judged.
    det_rows = payload["deterministic"]["rows"]
    assert [r["case"] for r in det_rows] == ["D16 S 48 B2", "D16 S 64 causal GQA 4/2 B1"]
    assert all(r["status"] == "ok" and r["bitwise"] is True and r["ratio"] for r in det_rows), det_rows
    assert all(len(r["round_ratios"]) == 2 for r in det_rows)
    assert "Deterministic mode:" in captured.out
    assert any(b["part"] == "deterministic" and b["verdict"] in ("PASS", "FAIL") for b in payload["bars"])
    # The feature rows: on CPU SDPA inside enable() is PyTorch's own, so ours is n/a for dropout (never
    # a PyTorch time under our label) while PyTorch's default choice is timed; each round times every
    # column once; the bars are judged or n/a.
    assert "Features (issue 14):" in captured.out
    frows = {(r["case"], r["column"], r["direction"]): r for r in payload["features"]["rows"]}
    assert len(frows) == 2 * (len(features.DROPOUT_BACKENDS) + len(features.SOFTCAP_VARIANTS))
    assert all(len(r["round_tflops"]) == 2 for r in frows.values())
    assert frows[(features.DROPOUT_NAME, "ours", "fwd")]["tflops"] is None
    assert frows[(features.DROPOUT_NAME, "torch-default", "bwd")]["tflops"]
    assert sum(b["part"] == "features" for b in payload["bars"]) == 6


def test_quick_runs_the_sweep_alone(fake_cuda: None, tmp_path: Path) -> None:
    rc = cli.main(["bench", "--quick", "--head-dims", "16", "--seqlens", "32", "--tokens", "64", "--hidden", "32",
                   "--reps", "1", "--warmup", "0", "--no-overhead", "--no-plot", "--no-memory", "--out", str(tmp_path)])
    payload = json.loads((tmp_path / "results.json").read_text())
    assert rc in (0, 1) and payload["parts"] == ["sweep"] and payload["args"]["rounds"] == 1
    assert payload["models"] is None and payload["decode"] is None


def test_model_samples_interleave_across_variants(monkeypatch: pytest.MonkeyPatch) -> None:
    """A case's samples alternate between its variants (each pass rotated) and each round keeps
    their median: drift on the host lands on every variant, not on the one measured last."""
    order: list[str] = []
    times = {"enable": iter([10.0, 30.0, 11.0]), "default": iter([20.0, 21.0, 90.0])}

    def fake_measure(self: object, case: models.Case, variant: str) -> float:
        order.append(variant)
        return next(times[variant])

    monkeypatch.setattr(models._Runner, "measure", fake_measure)
    monkeypatch.setattr(models._Runner, "release", lambda self: None)
    monkeypatch.setattr(models, "variant_context", lambda variant: contextlib.nullcontext())
    monkeypatch.setattr(models, "served_total", lambda: 0)
    monkeypatch.setattr(models, "CASES", (models.Case("small", "train", "small-fp32", 8, 128, 20,
                                                       ("enable", "default"), samples=3),))  # fmt: skip
    result = models.run_models(argparse.Namespace(rounds=1, model_impl="torch"))
    assert order == ["enable", "default", "default", "enable", "enable", "default"]
    by_variant = {r["variant"]: r for r in result["rows"]}
    assert by_variant["enable"]["round_ms"] == [11.0] and by_variant["default"]["round_ms"] == [21.0]


def test_small_model_rows_give_every_variant_each_place_equally() -> None:
    """The small models' host-bound rows sit at their bar within the rounds' noise: within a round
    each variant must take each place of the rotated order equally often (5 samples over 2 variants
    put one first 3 times in 5), whatever the round."""
    small = [case for case in models.CASES if case.model.startswith("small")]
    assert small
    for case in small:
        for round_index in range(3):
            places = Counter(
                (place, variant)
                for sample in range(case.samples)
                for place, variant in enumerate(rounds.rotated(case.variants, round_index + sample))
            )
            assert set(places.values()) == {case.samples // len(case.variants)}, (case.name, places)
            assert len(places) == len(case.variants) ** 2, (case.name, places)


def test_model_cases_select_by_name_and_refuse_no_match() -> None:
    """`bench --models --model-cases TEXT...` runs only the named rows (more rounds of one host-bound
    row in the same device time); a name matching nothing is an error listing the cases."""
    assert models.selected_cases(None) == models.CASES
    chosen = models.selected_cases(["small train bf16"])
    assert [c.name for c in chosen] == ["small train bf16"]
    assert [c.name for c in models.selected_cases(["generate", "prefill"])] == [
        "prefill B1x8k", "generate after 4k", "generate after 12k"]  # fmt: skip
    with pytest.raises(ValueError, match="matches no model case.*small train fp32"):
        models.selected_cases(["no such row"])
    from flashsdpa.bench import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)  # the flag exists on the CLI
    assert parser.parse_args(["--models", "--model-cases", "small train bf16"]).model_cases == ["small train bf16"]


def test_window_rounds_interleave_the_masks() -> None:
    # A B B A within a round and the masks swapped every other round: each mask is timed as often
    # right after the heaviest call (a forward + backward) as the other, and every (mask, direction)
    # once a round.
    first, second = window._round_order(0), window._round_order(1)
    assert first == [("causal", "fwd"), ("window", "fwd"), ("window", "fwd+bwd"), ("causal", "fwd+bwd")]
    assert second == [("window", "fwd"), ("causal", "fwd"), ("causal", "fwd+bwd"), ("window", "fwd+bwd")]
    assert window._round_order(2) == first
