# test_cli.py: the command line (python -m flashsdpa info | explain | bench) on CPU: exit codes,
# explain's verdicts on fake CUDA tensors, bench's FLOP count, ratios and files, and the no-GPU
# self-check of the shim that `python -m flashsdpa bench` runs on a machine without a GPU.
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch

from flashsdpa import buildcheck, cli
from flashsdpa.bench import bars, overhead, report
from flashsdpa.bench.problems import Problem, Result, parse_count


def test_parse_count() -> None:
    assert [parse_count(s) for s in ("512", "8k", "1M")] == [512, 8192, 1 << 20]
    with pytest.raises(Exception, match="not a size"):
        parse_count("eight")


def test_flops_follow_flashattention() -> None:
    p = Problem(head_dim=128, seqlen=8192, causal=False, batch=2, heads=16)
    assert p.flops("fwd") == 4 * 2 * 16 * 8192 * 8192 * 128
    assert p.flops("bwd") == 2.5 * p.flops("fwd")
    assert Problem(128, 8192, True, 2, 16).flops("fwd") == p.flops("fwd") / 2


def test_explain_exit_codes(fake_build, capsys) -> None:
    assert cli.main(["explain", "--seqlen-q", "8k", "--causal"]) == 0
    assert "served by flashsdpa" in capsys.readouterr().out
    assert cli.main(["explain", "--dropout", "0.1", "--dtype", "fp32"]) == 1
    out = capsys.readouterr().out
    assert "dropout_p=0.1" in out and "float32" in out
    with pytest.raises(SystemExit) as exc:
        cli.main(["explain", "--heads-q", "3", "--heads-kv", "2"])
    assert exc.value.code == 2


def test_info_json(capsys) -> None:
    """info reports the build that was asked for: _C loads (exit 0), with CUDA kernels exactly when
    its build request (FLASHSDPA_CUDA, a CUDA compiler) called for them. A missing _C fails."""
    rc = cli.main(["info", "--json"])
    info = json.loads(capsys.readouterr().out)
    assert info["torch"]["version"] == torch.__version__
    assert info["build"]["import_error"] is None and rc == 0
    request = buildcheck.load_request()
    assert request is not None, "no _build_request.json next to _C: build it with setup.py"
    expected = buildcheck.expected_build(request)
    assert info["build"]["with_cuda"] == expected["with_cuda"]
    if expected["with_cuda"]:
        assert sorted(info["build"]["kernel_families"]) == expected["kernel_families"]


def _results() -> list[Result]:
    rows = []
    for backend, tflops in (("flashsdpa", 300.0), ("torch-flash", 200.0), ("torch-cudnn", 400.0)):
        rows.append(Result("fwd", 128, 4096, False, 4, 16, backend, ms=1.0, tflops=tflops, status="ok"))
    rows.append(Result("fwd", 128, 4096, False, 4, 16, "torch-efficient", status="unsupported: no"))
    return rows


def test_ratios_and_files(tmp_path: Path) -> None:
    (row,) = report.ratios(_results())
    assert row["ours_over_flash"] == pytest.approx(1.5)
    assert row["ours_over_best"] == pytest.approx(0.75)
    wrong = _results()
    wrong[0].status = "WRONG"
    assert report.ratios(wrong)[0]["ours_over_best"] is None  # a wrong kernel never scores
    written = report.write_files(tmp_path, _results(), {"results": []})
    assert [p.name for p in written] == ["results.csv", "results.json"]
    pytest.importorskip("matplotlib")
    assert "plot" in report.plot(_results(), tmp_path / "tflops.png")
    assert (tmp_path / "tflops.png").stat().st_size > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="the self-check is what bench runs without a GPU")
def test_bench_without_gpu_runs_the_self_check(capsys) -> None:
    assert cli.main(["bench"]) == 0
    out = capsys.readouterr().out
    assert "No CUDA GPU" in out and "self-check: all passed" in out


def test_overhead_report(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The overhead report's fields, derived figures, bars and table, run on CPU tensors (no GPU
    here: the numbers mean nothing, the structure is what is checked; the fields of earlier reports
    stay). The aten flash op has no CPU kernel, so its rows are reported unsupported here."""
    randn = torch.randn
    monkeypatch.setattr(torch, "randn", lambda *size, device=None, **kwargs: randn(*size, **kwargs))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(overhead, "ATTENTION_STEP_SHAPE", (1, 2, 16, 8))  # the structure, at CPU cost
    o = overhead.overhead_us(torch.bfloat16, rounds=3, calls_per_round=2)
    assert {"shape", "dtype", "us_per_call", "shim_overhead_us", "status", "bars_us"} <= set(o)
    assert o["shape"] == [1, 4, 64, 64] and o["dtype"] == "bfloat16"
    assert o["bars_us"] == {"no grad, equal work": 0.0, "grad (fwd)": 2.0, "backward": 2.0,
                            "unserved step (float32)": 2.0}  # fmt: skip
    # cuDNN has no CPU kernel either: its attention-step row is reported unsupported here.
    assert set(o["status"]) <= {"torch-flash (aten)", "flashsdpa-sdpa (aten)", "torch-cudnn (attention step)"}
    assert set(o["us_per_call"]) == {"torch-flash", "flashsdpa-sdpa", "flashsdpa"}
    sides = {"torch-flash", "flashsdpa-sdpa"}
    for field in ("equal_us_per_call", "grad_us_per_call", "step_us_per_call", "bwd_us_per_call"):
        assert set(o[field]) == sides, field
    us, grad, step, bwd = o["us_per_call"], o["grad_us_per_call"], o["step_us_per_call"], o["bwd_us_per_call"]
    rounds = o["us_rounds"]  # every variant's per-round times, in round order
    assert set(rounds) == set(o["us_spread"]) and all(len(r) in (0, 3) for r in rounds.values())
    for name, times in rounds.items():  # the medians reported are those of the rounds kept
        assert (o["us_spread"][name] is None) == (not times)

    def paired(ours: list[float], theirs: list[float]) -> float | None:  # the bars: medians of differences
        return statistics.median(a - b for a, b in zip(ours, theirs, strict=True)) if ours and theirs else None

    def back(side: str) -> list[float]:
        return [s - g for s, g in zip(rounds[f"{side} (step)"], rounds[f"{side} (grad)"], strict=True)]

    assert us["flashsdpa-sdpa"] == pytest.approx(statistics.median(rounds["flashsdpa-sdpa"]))
    assert o["shim_overhead_us"] == pytest.approx(paired(rounds["flashsdpa-sdpa"], rounds["torch-flash"]))
    for road in ("grad", "step"):
        field = f"{road}_shim_overhead_us"
        assert o[field] == pytest.approx(paired(rounds[f"flashsdpa-sdpa ({road})"], rounds[f"torch-flash ({road})"]))
    for side in sides:  # the backward alone: the step less its forward, on each side
        assert bwd[side] == pytest.approx(step[side] - grad[side])
    assert o["bwd_shim_overhead_us"] == pytest.approx(paired(back("flashsdpa-sdpa"), back("torch-flash")))
    if not o["status"]:
        assert o["equal_shim_overhead_us"] == pytest.approx(
            paired(rounds["flashsdpa-sdpa (aten)"], rounds["torch-flash (aten)"]))  # fmt: skip
    else:  # unsupported rows give no figure, never a made-up one
        assert o["equal_shim_overhead_us"] is None
    unserved = o["unserved_step_us_per_call"]  # float32: PyTorch's kernels on both sides
    assert set(unserved) == {"torch-default", "flashsdpa-sdpa"} and all(v is not None for v in unserved.values())
    assert o["unserved_step_overhead_us"] == pytest.approx(
        paired(rounds["flashsdpa-sdpa (unserved)"], rounds["torch-default (unserved)"]))  # fmt: skip
    attention = o["attention_step_us_per_step"]  # issue 9's attention-only small step
    assert o["attention_step_shape"] == [1, 2, 16, 8]
    assert set(attention) == {"torch-flash", "torch-cudnn", "torch-default", "flashsdpa-sdpa"}
    assert all(attention[name] is not None for name in ("torch-flash", "torch-default", "flashsdpa-sdpa"))
    assert o["attention_step_vs_flash_us"] == pytest.approx(
        paired(rounds["flashsdpa-sdpa (attention step)"], rounds["torch-flash (attention step)"]))  # fmt: skip
    if attention["torch-cudnn"] is None:
        assert o["attention_step_vs_cudnn_us"] is None
    assert (o["rounds"], o["calls_per_round"]) == (3, 2) and len(o["us_spread"]) == 15
    json.dumps(o)  # goes into results.json as it is
    report.print_overhead(o)
    out = capsys.readouterr().out
    assert "median of 3 interleaved rounds" in out and "not equal work" in out and "the headline" in out
    assert out.count("\n  flashsdpa-sdpa ") == 1 and "shim overhead" in out
    assert "bars: no grad, equal work <= 0 us, grad (fwd) <= 2 us, backward <= 2 us" in out
    assert "unserved step (float32) <= 2 us over PyTorch alone" in out and "unserved step (float32 fwd + bwd" in out
    assert "attention step (1x2x16x8 causal, fwd + bwd, us a step): torch-flash " in out
    names = [b.name for b in bars.overhead_bars(o)]
    assert names == ["shim per-call overhead, no grad, equal work", "shim per-call overhead, grad (fwd)",
                     "shim per-call overhead, backward", "shim per-call overhead, unserved step (float32)",
                     "attention step 1x2x16x8 causal fwd+bwd: ours - FA2 only"]  # fmt: skip
