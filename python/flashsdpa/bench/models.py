# bench/models.py: the model rows, `python -m flashsdpa bench --models` (part of the full run).
#
# Users feel models, not kernels. A Llama-style decoder (llama.py: Hugging Face's where
# transformers imports, else a plain-torch one of the same shape), random weights, bf16:
#   prefill B 1 x 8k (no grad), train step with fused AdamW at B 1 x 8k and B 4 x 2k, per-token
#   greedy generation after 4k and 12k prompts (dynamic cache, as HF's default), and the
#   shim-cost issue's small model (hidden 256, 4 layers, B 8 x S 128 train step, fp32 and bf16),
# each inside flashsdpa.enable(), with PyTorch's default, FA2 only and cuDNN only. The variants
# are interleaved: each round runs every variant of every case once, rotated from round to round;
# rows report medians over rounds and ratios are medians of per-round ratios (rounds.py). Times
# are CUDA events around several steps, starting from an idle GPU (synchronised first), so host
# time counts as users feel it; generation reads each token back to the host, as a streaming loop
# (and generate()'s stopping check) does; the small models' rows keep the median of 8 measurements
# a round (Case.samples), the train and generate rows of 3, interleaved across the variants. Budget
# on an H200: about a minute for three rounds with only the small rows sampled (56-61 s in session
# 8); the 3 samples of the large rows add ~30 s (estimated from their per-sample times).
"""Model rows: a Llama-style decoder's prefill, train step and generation, inside and outside enable()."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from flashsdpa.bench import problems
from flashsdpa.bench.llama import LARGE, SMALL, Decoder, DecoderShape, build, parameter_count, transformers_missing
from flashsdpa.bench.problems import api, served_total
from flashsdpa.bench.rounds import median, ratio_over_rounds, rotated
from flashsdpa.bench.timing import UNSUPPORTED, unsupported_status

VARIANTS = ("enable", "default", "fa2", "cudnn")
VARIANT_LABELS = {
    "enable": "inside flashsdpa.enable()",
    "default": "PyTorch's default",
    "fa2": "sdpa_kernel(FLASH_ATTENTION)",
    "cudnn": "sdpa_kernel(CUDNN_ATTENTION)",
}


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # prefill | train | generate
    model: str  # key of MODELS
    batch: int
    seqlen: int  # tokens per sequence; the prompt's for generate
    reps: int  # timed steps per measurement; generated tokens for generate
    variants: tuple[str, ...] = VARIANTS
    # Measurements per round, their median kept: the small models' steps are host-bound (~10 ms
    # of Python and launches), and one 20-step measurement a round read 1.09x for a variant that
    # runs none of our kernels (session 7, device call 8); the median of several damps such outliers,
    # and the samples interleave across the variants (run_models) so that drift lands on all.
    samples: int = 1


# model key -> (shape, dtype)
MODELS: dict[str, tuple[DecoderShape, torch.dtype]] = {
    "large": (LARGE, torch.bfloat16),
    "small-fp32": (SMALL, torch.float32),
    "small-bf16": (SMALL, torch.bfloat16),
}

CASES = (
    Case("prefill B1x8k", "prefill", "large", 1, 8192, 5),
    # Three interleaved samples a round for the rows whose ratio sits at the bar (train B4x2k read
    # 1.000x and 0.997x in two calls of session 8) or swings with the host (generation: 0.744x in
    # session 7, 1.043x in session 8, ~7 ms of Python and launches per token).
    Case("train B1x8k", "train", "large", 1, 8192, 4, samples=3),
    Case("train B4x2k", "train", "large", 4, 2048, 4, samples=3),
    Case("generate after 4k", "generate", "large", 1, 4096, 32, samples=3),
    Case("generate after 12k", "generate", "large", 1, 12288, 32, samples=3),
    # fp32: attention falls back to PyTorch inside enable() too; the bar is what the shim costs.
    # 8 samples: a multiple of the case's variant count, so that each variant takes each place of
    # the rotated order equally often in every round (5 over 2 variants put one first 3 times of
    # 5; session 22's per-round ratios 1.029 / 0.986 / 1.028 followed that count, with the two
    # medians over the rounds equal: 14.90 / 14.89 ms).
    Case("small train fp32", "train", "small-fp32", 8, 128, 20, ("enable", "default"), samples=8),
    Case("small train bf16", "train", "small-bf16", 8, 128, 20, samples=8),
)


@contextlib.contextmanager
def variant_context(variant: str) -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's long warnings about each backend it rejects
        if variant == "enable":
            with api().enable():
                yield
        elif variant in ("fa2", "cudnn"):
            backend = SDPBackend.FLASH_ATTENTION if variant == "fa2" else SDPBackend.CUDNN_ATTENTION
            with sdpa_kernel([backend]):
                yield
        else:
            yield


def _events_ms(fn: Callable[[], object], reps: int) -> float:
    """Milliseconds per call of ``fn`` over ``reps`` calls, from an idle GPU: what a host-bound
    step costs counts (the GPU waits for the host inside the timed span)."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


class _Runner:
    """Models, optimizers and inputs, built once and shared by every variant and round."""

    def __init__(self, impl: str) -> None:
        self.impl = impl
        self.decoders: dict[str, Decoder] = {}
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self.inputs: dict[str, torch.Tensor] = {}
        self.warm: set[tuple[str, str]] = set()

    def decoder(self, key: str) -> Decoder:
        if key not in self.decoders:
            shape, dtype = MODELS[key]
            torch.manual_seed(0)
            self.decoders[key] = build(shape, dtype, problems.DEVICE, self.impl)
        return self.decoders[key]

    def optimizer(self, key: str) -> torch.optim.Optimizer:
        if key not in self.optimizers:
            # A tiny learning rate: the weights stay put (below bf16 resolution), so every variant
            # and round does the same work; the fused kernel runs all the same.
            self.optimizers[key] = torch.optim.AdamW(self.decoder(key).model.parameters(), lr=1e-6, fused=True)
        return self.optimizers[key]

    def ids(self, case: Case) -> torch.Tensor:
        if case.name not in self.inputs:
            gen = torch.Generator(device=problems.DEVICE).manual_seed(len(self.inputs))
            vocab = MODELS[case.model][0].vocab
            self.inputs[case.name] = torch.randint(0, vocab, (case.batch, case.seqlen), device=problems.DEVICE, generator=gen)
        return self.inputs[case.name]

    def measure(self, case: Case, variant: str) -> float:
        dec, ids = self.decoder(case.model), self.ids(case)
        if case.kind == "train":
            opt = self.optimizer(case.model)

            def step() -> None:
                opt.zero_grad(set_to_none=True)
                dec.loss(ids).backward()
                opt.step()

            for _ in range(2):  # the first step also allocates AdamW's state
                step()
            return _events_ms(step, case.reps)
        with torch.no_grad():
            if case.kind == "prefill":
                dec.prefill(ids)
                return _events_ms(lambda: dec.prefill(ids), case.reps)
            if (case.name, variant) not in self.warm:
                # Every cache length once (cuDNN builds a plan per shape), before any timed round.
                self.warm.add((case.name, variant))
                self._generate(dec, ids, case.reps)
            return self._generate(dec, ids, case.reps)

    @staticmethod
    def _generate(dec: Decoder, ids: torch.Tensor, tokens: int) -> float:
        token, cache = dec.prefill(ids)
        token.cpu()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(tokens):
            token, cache = dec.step(token, cache)
            token.cpu()  # streamed to the user, as generate()'s stopping check syncs every token
        end.record()
        torch.cuda.synchronize()
        del cache
        return start.elapsed_time(end) / tokens

    def release(self) -> None:
        self.decoders.clear()
        self.optimizers.clear()
        self.inputs.clear()
        torch.cuda.empty_cache()


def _status(variant: str, served: int) -> str:
    """Whether a variant outside enable() ran PyTorch's kernels only. Inside enable() whatever
    served is what a user who opts in gets, so the row stands either way; how many calls our
    kernels served is recorded beside it (0 in bf16 means the shim fell back everywhere)."""
    if variant != "enable" and served:
        return "not served: flashsdpa's kernels took PyTorch's calls"
    return "ok"


def _measure_once(runner: _Runner, case: Case, variant: str, statuses: dict[tuple[str, str], str],
                  served: dict[tuple[str, str], int]) -> float | None:
    """One measurement of ``case`` under ``variant`` (None once it has failed), its status and the
    calls our kernels served recorded in ``statuses`` / ``served``."""
    key = (case.name, variant)
    if statuses.get(key, "ok") != "ok" and not statuses[key].startswith("not served"):
        return None  # failed before: do not retry
    served_before = served_total()
    try:
        with variant_context(variant):
            ms: float | None = runner.measure(case, variant)
        served_now = served_total() - served_before
        status = _status(variant, served_now)
        served[key] = served.get(key, 0) + served_now
    except torch.OutOfMemoryError:
        ms, status = None, "OOM"
        torch.cuda.empty_cache()
    except UNSUPPORTED as exc:
        if variant == "enable":  # inside enable() nothing may raise that PyTorch would not
            traceback.print_exc(limit=4, file=sys.stderr)
        ms, status = None, (f"error: {type(exc).__name__}: {str(exc).strip()[:100]}"
                            if variant == "enable" else unsupported_status(exc))
    except Exception as exc:  # noqa: BLE001 - one case's failure must not end the part
        traceback.print_exc(limit=4, file=sys.stderr)
        ms, status = None, f"error: {type(exc).__name__}: {str(exc).strip()[:100]}"
    if status != "ok" or key not in statuses:
        statuses[key] = status
    return ms


def selected_cases(names: list[str] | None) -> tuple[Case, ...]:
    """The cases whose name contains one of ``names`` (all for None); none matching is an error
    that lists the names, not an empty table."""
    if not names:
        return CASES
    chosen = tuple(c for c in CASES if any(n in c.name for n in names))
    if not chosen:
        raise ValueError(f"--model-cases {names!r} matches no model case; the cases: {', '.join(c.name for c in CASES)}")
    return chosen


def run_models(args: argparse.Namespace) -> dict[str, Any]:
    """Every case, every variant, ``args.rounds`` interleaved rounds; rows, ratios and what ran."""
    rounds = max(1, args.rounds)
    impl = getattr(args, "model_impl", "auto")
    cases = selected_cases(getattr(args, "model_cases", None))
    missing = transformers_missing()
    note = None
    if impl == "auto" and missing:
        note = f"transformers does not import ({missing}): the plain-torch decoder of the same shape ran"
        print(f"models: {note}", file=sys.stderr)
    runner = _Runner(impl)
    samples: dict[tuple[str, str], list[float | None]] = {}
    statuses: dict[tuple[str, str], str] = {}
    served: dict[tuple[str, str], int] = {}  # calls our kernels served, all rounds and warm-up
    started = time.perf_counter()
    try:
        for round_index in range(rounds):
            for case in cases:
                # A case's samples interleave across its variants (A B A B ..., each pass rotated):
                # a host-bound step drifts by 10-15% over seconds on the H200's host (session 8:
                # the fp32 small model, which runs none of our kernels, read 1.10x with each
                # variant's 5 samples taken back to back), and drift must land on both sides.
                taken: dict[tuple[str, str], list[float | None]] = {}
                for sample_index in range(case.samples):
                    for variant in rotated(case.variants, round_index + sample_index):
                        key = (case.name, variant)
                        taken.setdefault(key, []).append(_measure_once(runner, case, variant, statuses, served))
                for key, values in taken.items():
                    ms = median(values) if all(v is not None for v in values) else None
                    samples.setdefault(key, []).append(ms)
                    print(f"  models r{round_index + 1} {key[0]:<20} {key[1]:<8} "
                          f"{'-' if ms is None else f'{ms:8.2f} ms'}  {statuses.get(key, 'ok')}"
                          + (f"  (median of {len(values)})" if len(values) > 1 else ""), file=sys.stderr)
    finally:
        impl_ran = next((d.impl for d in runner.decoders.values()), None)
        params = {k: parameter_count(d) for k, d in runner.decoders.items()}
        runner.release()
    rows = [
        {
            "case": name,
            "variant": variant,
            "unit": "ms/token" if name.startswith("generate") else "ms/step",
            "ms": median(values),
            "round_ms": values,
            "status": statuses.get((name, variant), "ok"),
            "served_calls": served.get((name, variant), 0),
        }
        for (name, variant), values in samples.items()
    ]
    return {
        "impl": impl_ran,
        "note": note,
        "params": params,
        "rounds": rounds,
        "seconds": time.perf_counter() - started,
        "rows": rows,
        "ratios": model_ratios(rows),
    }


def model_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per case: inside enable() over each other variant, median of per-round ratios (lower is
    faster); a variant whose status is not ok (failed, or not what its label says) does not score."""
    by_case: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_case.setdefault(row["case"], {})[row["variant"]] = row
    out = []
    for case, variants in by_case.items():
        mine = variants.get("enable")
        entry: dict[str, Any] = {
            "case": case,
            "enable_ms": mine["ms"] if mine and mine["status"] == "ok" else None,
            "enable_served_calls": mine.get("served_calls") if mine else None,
        }
        for other in VARIANTS[1:]:
            theirs = variants.get(other)
            if mine is None or theirs is None or mine["status"] != "ok" or theirs["status"] != "ok":
                continue
            value, per_round = ratio_over_rounds(mine["round_ms"], theirs["round_ms"])
            entry[f"enable_over_{other}"], entry[f"enable_over_{other}_rounds"] = value, per_round
        out.append(entry)
    return out


def print_models(result: dict[str, Any] | None, out: Any = None) -> None:
    out = out or sys.stdout  # bound at call time: pytest and callers may swap sys.stdout
    if not result or not result.get("rows"):
        return
    params = ", ".join(f"{k} {v / 1e6:.1f} M" for k, v in result["params"].items())
    print(
        f"\nModels ({result['impl']}: {params}; median of {result['rounds']} interleaved round(s); "
        f"{result['seconds']:.0f} s){'; ' + result['note'] if result.get('note') else ''}",
        file=out,
    )
    ratios = {r["case"]: r for r in result["ratios"]}
    print(f"  {'case':<20} {'unit':<9}" + "".join(f"{v:>9}" for v in VARIANTS) + "   enable()/:" + "".join(
        f"{v:>9}" for v in VARIANTS[1:]), file=out)
    cases = list(dict.fromkeys(r["case"] for r in result["rows"]))
    by_key = {(r["case"], r["variant"]): r for r in result["rows"]}
    for case in cases:
        cells = []
        for v in VARIANTS:
            row = by_key.get((case, v))
            if row is None:
                cells.append(f"{'':>9}")
            elif row["ms"] is None:
                cells.append(f"{row['status'][:8]:>9}")
            else:
                cells.append(f"{row['ms']:8.2f}{' ' if row['status'] == 'ok' else '?'}")
        unit = by_key.get((case, "enable"), by_key.get((case, "default"), {})).get("unit", "")
        rr = ratios.get(case, {})
        ratio_cells = "".join(
            f"{rr[f'enable_over_{v}']:8.3f}x" if rr.get(f"enable_over_{v}") else f"{'-':>9}" for v in VARIANTS[1:]
        )
        served = by_key.get((case, "enable"), {}).get("served_calls")
        print(f"  {case:<20} {unit:<9}" + "".join(cells) + "             " + ratio_cells
              + ("" if served is None else f"  ours served {served} calls"), file=out)
    print("  (? = not what the label says: see the status in models.csv; served: calls our kernels took inside "
          "enable(), all rounds)", file=out)
