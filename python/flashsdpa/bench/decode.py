# bench/decode.py: the decode rows, `python -m flashsdpa bench --decode` (part of the full run).
#
# One query token against a KV cache, GQA 32 query / 8 KV heads, D 128: B 1 x 8k, B 1 x 128k and
# B 32 x 4k keys, as the decode issue's bars. Per backend: GPU µs per call (CUDA events around each
# call, median over rotated input sets so a cache that fits in L2 is not measured warm: the
# anchors were measured that way), effective TB/s (K and V bytes read / time), the host µs per
# call (wall time of the call from an idle GPU, no sync inside) beside it, and the graph µs per call
# (the calls captured in one CUDA graph and replayed: the GPU's own time, with the host out of the
# way, as a serving loop that replays its decode step sees it; where the host is slower than the
# kernels, the events-around-the-call time is the host's). Beside them, attention_with_kvcache on
# the same keys in a contiguous (B, S, Hkv, D) cache and in a paged one (page 64, shuffled pool):
# issue 11's bar that the paged call is within 5% of the contiguous one. Interleaved rounds as
# the sweep's; round 0 checks every backend's output against a float32 reference on the last batch
# row (the project's rule). Budget on an H200: about 10 s for three rounds.
"""Decode rows: µs per call and TB/s of one-token attention against a KV cache."""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from flashsdpa.bench import problems
from flashsdpa.bench.check import _reduced_precision_math
from flashsdpa.bench.problems import DTYPES, OURS, RULE_ATOL, RULE_FACTOR, TORCH_DEFAULT, api, served_total
from flashsdpa.bench.rounds import median, ratio_over_rounds, rotated
from flashsdpa.bench.timing import (
    UNSUPPORTED,
    backend_context,
    graph_us,
    sets_for_bytes,
    time_cuda_ms,
    unsupported_status,
)

DECODE_SHAPES = ((1, 8192), (1, 131072), (32, 4096))  # (batch, keys)
HEADS_Q, HEADS_KV, HEAD_DIM = 32, 8, 128
# flashsdpa.attention_with_kvcache on the same keys in flash_attn's cache layouts: a contiguous
# (B, S, Hkv, D) cache, and a paged pool of PAGE_SIZE-token pages in a shuffled order (as a serving
# engine's pool fragments) with its block table. Issue 11's bar: the paged call within 5% of the
# contiguous one. No new keys are appended (cache_seqlens = keys: the same work as the rows above).
KVCACHE = "flashsdpa-kvcache"
PAGED = "flashsdpa-paged64"
PAGE_SIZE = 64
DECODE_BACKENDS = ("flashsdpa", "flashsdpa-sdpa", KVCACHE, PAGED, "torch-flash", "torch-cudnn", TORCH_DEFAULT)
# Rows of ours: never "PyTorch's fastest", never flagged for being served.
_OURS = (*OURS, KVCACHE, PAGED)
DECODE_REPS, DECODE_WARMUP = 50, 5


def kv_bytes(batch: int, keys: int, element_size: int) -> int:
    """Bytes of K and V a decode call must read (each KV head once)."""
    return 2 * batch * HEADS_KV * keys * HEAD_DIM * element_size


def tbps(nbytes: int, us: float | None) -> float | None:
    return nbytes / (us * 1e-6) / 1e12 if us else None


def _call(backend: str, q: Tensor, k: Tensor, v: Tensor, cache: dict[str, Tensor] | None = None) -> Tensor:
    """One decode call; ``cache``: the set's KV-cache layouts (_cache_layouts) for the kvcache rows.
    Every backend returns (B, Hq, 1, D)."""
    if backend == "flashsdpa":
        return api().attention(q, k, v)
    if backend in (KVCACHE, PAGED):
        assert cache is not None
        if backend == KVCACHE:
            out = api().attention_with_kvcache(cache["q"], cache["k"], cache["v"], cache_seqlens=cache["seqlens"])
        else:
            out = api().attention_with_kvcache(cache["q"], cache["k_pages"], cache["v_pages"],
                                               cache_seqlens=cache["seqlens"], block_table=cache["block_table"])  # fmt: skip
        return out.transpose(1, 2)
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def _cache_layouts(q: Tensor, k: Tensor, v: Tensor, seed: int) -> dict[str, Tensor]:
    """The set's keys in attention_with_kvcache's layouts: q (B, 1, Hq, D), a contiguous cache
    (B, S, Hkv, D), and a pool of PAGE_SIZE-token pages, their order shuffled (seeded), with the
    block table that finds each sequence's pages. The same values as (q, k, v)."""
    batch, keys = k.shape[0], k.shape[2]
    k_cache, v_cache = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
    per_seq = -(-keys // PAGE_SIZE)
    pad = per_seq * PAGE_SIZE - keys  # the last page of a sequence partly used (its tail never read)
    # Pool slot s holds logical page perm[s], so logical page i sits in slot argsort(perm)[i].
    perm = torch.randperm(batch * per_seq, generator=torch.Generator().manual_seed(seed)).to(k.device)

    def pool(cache: Tensor) -> Tensor:
        padded = F.pad(cache, (0, 0, 0, 0, 0, pad)) if pad else cache
        return padded.reshape(batch * per_seq, PAGE_SIZE, *cache.shape[2:])[perm]

    return {
        "q": q.transpose(1, 2),
        "k": k_cache,
        "v": v_cache,
        "k_pages": pool(k_cache),
        "v_pages": pool(v_cache),
        "block_table": torch.argsort(perm).reshape(batch, per_seq).to(torch.int32),
        "seqlens": torch.full((batch,), keys, dtype=torch.int32, device=k.device),
    }


def _input_sets(batch: int, keys: int, dtype: torch.dtype) -> list[tuple[Tensor, Tensor, Tensor]]:
    """(q, k, v) sets, (B, H, S, D) contiguous as HF's cache holds them, enough of them that
    rotating through them keeps each call's cache out of L2."""
    count = sets_for_bytes(kv_bytes(batch, keys, torch.empty((), dtype=dtype).element_size()))
    return [
        (
            torch.randn(batch, HEADS_Q, 1, HEAD_DIM, device=problems.DEVICE, dtype=dtype),
            torch.randn(batch, HEADS_KV, keys, HEAD_DIM, device=problems.DEVICE, dtype=dtype),
            torch.randn(batch, HEADS_KV, keys, HEAD_DIM, device=problems.DEVICE, dtype=dtype),
        )
        for _ in range(count)
    ]


def _reference(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, float]:
    """float32 reference of the last batch row, and the error of PyTorch's math in the input dtype."""
    qs, ks, vs = q[-1:], k[-1:], v[-1:]
    with sdpa_kernel([SDPBackend.MATH]):
        ref = F.scaled_dot_product_attention(qs.float(), ks.float(), vs.float(), enable_gqa=True)
        with _reduced_precision_math():
            pt = F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True)
    return ref, (pt.float() - ref).abs().max().item()


def _host_us(call: Callable[[], object], reps: int) -> float:
    """Median wall µs of one call issued to an idle GPU (the host's share: Python, dispatch, launch)."""
    samples = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(samples)


def _bound_call(backend: str, s: tuple[Tensor, Tensor, Tensor], cache: dict[str, Tensor]) -> Callable[[], Tensor]:
    """One timed decode call: _call on one input set and its cache layout."""
    q, k, v = s
    return lambda: _call(backend, q, k, v, cache)


def _graph_us(calls: Sequence[Callable[[], object]]) -> float | None:
    """timing.graph_us of the calls (cycling through the input sets), or None where the backend
    cannot be captured (the row's status stays that of the event timing)."""
    try:
        return graph_us(calls)
    except Exception:  # noqa: BLE001 - a backend that cannot be captured has no graph time
        torch.cuda.synchronize()
        return None


def _measure(
    backend: str, sets: list[tuple[Tensor, Tensor, Tensor]], caches: list[dict[str, Tensor]],
    reference: tuple[Tensor, float] | None,
) -> dict[str, Any]:
    row: dict[str, Any] = {"us": None, "host_us": None, "graph_us": None, "status": "ok", "max_err": None,
                           "err_ratio": None}  # fmt: skip
    served_before = served_total()
    try:
        with backend_context(backend), torch.no_grad():
            calls = [_bound_call(backend, s, c) for s, c in zip(sets, caches)]
            out = calls[0]()
            row["us"] = time_cuda_ms(calls, warmup=DECODE_WARMUP, reps=DECODE_REPS) * 1e3
            row["host_us"] = _host_us(calls[0], 21)
            row["graph_us"] = _graph_us(calls)
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        row["status"] = "OOM"
        return row
    except UNSUPPORTED as exc:
        row["status"] = unsupported_status(exc)
        return row
    except Exception as exc:  # noqa: BLE001 - one backend's surprise must not end the part
        traceback.print_exc(limit=3, file=sys.stderr)
        row["status"] = f"error: {type(exc).__name__}: {str(exc).strip()[:100]}"
        return row
    served = served_total() > served_before
    if backend == "flashsdpa-sdpa" and not served:
        row["status"] = "not served: PyTorch's kernel ran (see flashsdpa.explain)"
    elif backend not in _OURS and served:
        row["status"] = "not served: flashsdpa's kernels took PyTorch's call"
    if reference is not None:
        ref, pt_err = reference
        err = (out[-1:].float() - ref).abs().max().item() if bool(torch.isfinite(out).all()) else math.inf
        row["max_err"], row["err_ratio"] = err, err / (RULE_FACTOR * pt_err + RULE_ATOL)
        if row["err_ratio"] > 1.0 and row["status"] == "ok":
            row["status"] = "WRONG"
    return row


def run_decode(args: argparse.Namespace, backends: list[str] | None = None) -> dict[str, Any]:
    """Every decode shape, every backend, ``args.rounds`` interleaved rounds."""
    dtype = DTYPES[args.dtype]
    # The kvcache rows are the direct API's (--backends flashsdpa takes them too).
    names = [b for b in DECODE_BACKENDS if backends is None or b in backends or b == TORCH_DEFAULT
             or (b in (KVCACHE, PAGED) and "flashsdpa" in backends)]  # fmt: skip
    started = time.perf_counter()
    sets = {shape: _input_sets(*shape, dtype) for shape in DECODE_SHAPES}
    caches = {shape: [_cache_layouts(*s, seed=i) for i, s in enumerate(sets[shape])] for shape in DECODE_SHAPES}
    samples: dict[tuple[int, int, str], list[dict[str, Any]]] = {}
    for round_index in range(max(1, args.rounds)):
        for shape in DECODE_SHAPES:
            reference = _reference(*sets[shape][0]) if round_index == 0 and not args.no_check else None
            for backend in rotated(names, round_index):
                earlier = samples.setdefault((*shape, backend), [])
                if earlier and earlier[0]["status"].startswith(("unsupported", "OOM", "error")):
                    earlier.append(earlier[0])
                    continue
                earlier.append(_measure(backend, sets[shape], caches[shape], reference))
    del sets, caches
    torch.cuda.empty_cache()
    size = torch.empty((), dtype=dtype).element_size()
    rows = []
    for (batch, keys, backend), rounds in samples.items():
        nbytes = kv_bytes(batch, keys, size)
        statuses = [r["status"] for r in rounds]
        checked = rounds[0]
        us = median([r["us"] for r in rounds])
        rows.append(
            {
                "batch": batch,
                "keys": keys,
                "backend": backend,
                "kv_mb": nbytes / 1e6,
                "us": us,
                "tbps": tbps(nbytes, us),
                "host_us": median([r["host_us"] for r in rounds]),
                "graph_us": median([r["graph_us"] for r in rounds]),
                "status": next((s for s in statuses if s != "ok"), "ok"),
                "max_err": checked["max_err"],
                "err_ratio": checked["err_ratio"],
                "round_us": [r["us"] for r in rounds],
                "round_host_us": [r["host_us"] for r in rounds],
            }
        )
    return {"rows": rows, "summary": decode_summary(rows, size), "seconds": time.perf_counter() - started}


def decode_summary(rows: list[dict[str, Any]], element_size: int = 2) -> list[dict[str, Any]]:
    """Per shape: ours (direct API) µs and TB/s, and ours over PyTorch's fastest backend (median of
    per-round time ratios: below 1 is faster)."""
    by_shape: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_shape.setdefault((row["batch"], row["keys"]), {})[row["backend"]] = row
    out = []
    for (batch, keys), row in by_shape.items():
        mine = row.get("flashsdpa")
        ok_mine = mine if mine and mine["status"] == "ok" else None
        theirs = {n: r for n, r in row.items() if n not in _OURS and r["status"] == "ok" and r["us"]}
        n = max([len(r["round_us"]) for r in row.values()] + [1])
        fastest_rounds = [
            min((r["round_us"][i] for r in theirs.values() if i < len(r["round_us"]) and r["round_us"][i]), default=None)
            for i in range(n)
        ]
        value, per_round = ratio_over_rounds(ok_mine["round_us"] if ok_mine else [None] * n, fastest_rounds)
        fastest = min(theirs, key=lambda name: theirs[name]["us"]) if theirs else None
        # The paged cache against the contiguous one (both attention_with_kvcache), per round.
        contiguous, paged = (r if r and r["status"] == "ok" else None for r in (row.get(KVCACHE), row.get(PAGED)))
        paged_over, paged_rounds = ratio_over_rounds(
            paged["round_us"] if paged else [None] * n, contiguous["round_us"] if contiguous else [None] * n
        )
        out.append(
            {
                "batch": batch,
                "keys": keys,
                "kv_mb": kv_bytes(batch, keys, element_size) / 1e6,
                "ours_us": ok_mine["us"] if ok_mine else None,
                "ours_tbps": ok_mine["tbps"] if ok_mine else None,
                "fastest": fastest,
                "fastest_us": theirs[fastest]["us"] if fastest else None,
                "ours_over_fastest": value,
                "ours_over_fastest_rounds": per_round,
                "paged_over_contiguous": paged_over,
                "paged_over_contiguous_rounds": paged_rounds,
            }
        )
    return out


def print_decode(result: dict[str, Any] | None, out: Any = None) -> None:
    out = out or sys.stdout  # bound at call time: pytest and callers may swap sys.stdout
    if not result or not result.get("rows"):
        return
    print(
        f"\nDecode: one query token, GQA {HEADS_Q}/{HEADS_KV}, D {HEAD_DIM}; GPU µs per call (CUDA events, rotated "
        f"inputs, median over rounds), TB/s = K+V bytes / time, host µs per call, graph µs per call (replayed "
        f"in a CUDA graph: the GPU's own time) ({result['seconds']:.0f} s)",
        file=out,
    )
    print(f"  {'B':>3} {'keys':>7} {'backend':<18} {'µs':>9} {'TB/s':>6} {'host µs':>8} {'graph µs':>9}  status",
          file=out)  # fmt: skip
    for r in result["rows"]:
        us = f"{r['us']:9.1f}" if r["us"] else f"{'-':>9}"
        tb = f"{r['tbps']:6.2f}" if r["tbps"] else f"{'-':>6}"
        host = f"{r['host_us']:8.1f}" if r["host_us"] else f"{'-':>8}"
        graph = f"{r['graph_us']:9.1f}" if r.get("graph_us") else f"{'-':>9}"
        print(f"  {r['batch']:>3} {r['keys']:>7} {r['backend']:<18} {us} {tb} {host} {graph}  {r['status']}", file=out)
    for s in result["summary"]:
        ratio = f"{s['ours_over_fastest']:.2f}x" if s["ours_over_fastest"] else "-"
        paged = f"{s['paged_over_contiguous']:.3f}x" if s.get("paged_over_contiguous") else "-"
        print(f"  B {s['batch']} x {s['keys']} keys: ours / fastest PyTorch ({s['fastest']}) = {ratio} time; "
              f"paged (page {PAGE_SIZE}) / contiguous cache = {paged} time", file=out)  # fmt: skip
