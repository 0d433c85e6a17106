"""decode_host_cost.py: the host (Python) cost of one decode call, on CPU, launches mocked (issue 11).

    PYTHONPATH=python python3 scripts/dev/decode_host_cost.py [--rounds 15] [--calls 2000] [--ops]

The bench's decode shape (B 1, GQA 32/8, D 128, bf16, one query token, 8k keys) through the three
roads a decode call takes: SDPA inside enable() (the entry's eager path), the direct API
``flashsdpa.attention`` and ``flashsdpa.attention_with_kvcache`` (with and without appending one
token), then the pieces of each. As shim_cost.py --cpu (whose stand-ins it reuses): a _C that
answers like a CUDA build and launches nothing, CPU tensors that answer is_cuda=True. What it
cannot see: the CUDA caching allocator (torch.empty on a GPU costs more than on the CPU) and _C's
own C++ (parsing, checks, the launches). Interleaved rounds, each timed on the thread's CPU clock
(the machine is shared); the median round, min and max, in microseconds per call. The numbers before / after each change: docs/kernel_notes_decode.md.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from typing import Any

import shim_cost  # scripts/dev/shim_cost.py, beside this file
import torch
import torch.nn.functional as F

import flashsdpa
from flashsdpa import _backend, entry, masks

BATCH, HEADS_Q, HEADS_KV, HEAD_DIM, KEYS = 1, 32, 8, 128, 8192


class _DecodeBuild(shim_cost._NoLaunchBuild):
    """shim_cost's stand-in with the decode path: the plan _C gives the bench's B 1 x 8k shape on an
    H200 (32 splits: 8 kv heads x 1 packed block fill 8 of 264 slots)."""

    DECODE_MAX_SEQLEN_Q = 16
    MAX_SPLITS = 128

    def capabilities(self) -> dict[str, Any]:
        table = super().capabilities()
        table["families"][0]["layouts"] = ["dense", "varlen", "decode"]
        return table

    def decode_plan(self, device: int, dtype: int, sizes: tuple[int, ...], mask: int, kv_cache: bool,
                    num_splits: int) -> tuple[Any, ...]:  # fmt: skip
        batch, heads_q, _, seqlen_q, _, _, head_dim_v = sizes
        splits = num_splits or 32
        rows = batch * heads_q * seqlen_q * splits if splits > 1 else 0
        return ("sm80", splits, rows * head_dim_v * 4, rows * 4, None)


@contextlib.contextmanager
def _decode_lookalike() -> Any:
    saved = _backend._C, _backend.IMPORT_ERROR
    with shim_cost._cuda_lookalike():
        _backend._configure(_DecodeBuild())
        try:
            yield
        finally:
            _backend._configure(*saved)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--ops", action="store_true", help="count each road's torch ops instead of timing")
    args = parser.parse_args()
    torch.manual_seed(0)
    dt = torch.bfloat16
    # SDPA's layout (B, H, S, D) for SDPA and attention(); flash_attn's (B, S, H, D) for the cache.
    q = torch.randn(BATCH, HEADS_Q, 1, HEAD_DIM, dtype=dt)
    k, v = (torch.randn(BATCH, HEADS_KV, KEYS, HEAD_DIM, dtype=dt) for _ in range(2))
    q_c = torch.randn(BATCH, 1, HEADS_Q, HEAD_DIM, dtype=dt)
    k_cache, v_cache = (torch.randn(BATCH, KEYS, HEADS_KV, HEAD_DIM, dtype=dt) for _ in range(2))
    k_new, v_new = (torch.randn(BATCH, 1, HEADS_KV, HEAD_DIM, dtype=dt) for _ in range(2))
    seqlens = torch.full((BATCH,), KEYS - 1, dtype=torch.int32)  # room for the appended token
    out, out_c = torch.empty_like(q), torch.empty_like(q_c)
    mask = masks.CAUSAL_BOTTOM_RIGHT
    no_grad = torch.no_grad
    sdpa = entry.scaled_dot_product_attention
    spec: list[tuple[Any, ...]] = []  # built inside the stand-in (it needs its dtype codes)
    rows: list[shim_cost.Row] = [
        ("SDPA decode, enable()'s eager path (F.sdpa, enable_gqa)", lambda: sdpa(q, k, v, enable_gqa=True),
         lambda: shim_cost._entry_on(no_grad())),
        ("flashsdpa.attention decode (direct API)", lambda: flashsdpa.attention(q, k, v), no_grad),
        ("attention_with_kvcache, no new token", lambda: flashsdpa.attention_with_kvcache(
            q_c, k_cache, v_cache, cache_seqlens=seqlens), no_grad),
        ("attention_with_kvcache, one new token appended", lambda: flashsdpa.attention_with_kvcache(
            q_c, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens), no_grad),
        ("  _backend.launch_fwd (decode: plan, workspace, spec; _C.fwd no-op)",
         lambda: _backend.launch_fwd(q, k, v, out, None, 0.125, masks.NO_MASK), no_grad),
        ("  _backend.launch_kvcache (same)", lambda: _backend.launch_kvcache(
            q_c, k_cache, v_cache, out_c, None, 0.125, mask, seqlens, None, 0), no_grad),
        ("  _backend._spec (dense)", lambda: _backend._spec(q, k, v, out, None, 0.125, masks.NO_MASK, None), no_grad),
        ("  _backend._decode_item (plan lookup + workspace)", lambda: _backend._decode_item(
            spec[0], masks.NO_MASK, False, 0, q.device), no_grad),
        ("  the workspace alone (torch.empty, 512 KB)", lambda: _backend.new_workspace(528640, q.device), no_grad),
        ("  torch.empty_like(q) (SDPA's output)", lambda: torch.empty_like(q), no_grad),
        ("  cache_seqlens + 1 (the kv-cache key counts)", lambda: seqlens + 1, no_grad),
    ]  # fmt: skip
    with _decode_lookalike():
        spec.append(_backend._spec(q, k, v, out, None, 0.125, masks.NO_MASK, None))
        if args.ops:
            _count_ops(rows[:4])
            return
        # This thread's CPU time, not wall time: on a shared machine (load 8 on 2 cores, session 9) the
        # wall clock counts other processes' slices; two runs of the same code differed by 2x.
        samples = shim_cost._interleaved(rows, args.rounds, args.calls, lambda: None, clock=time.thread_time)
    shim_cost._print(samples)


def _count_ops(rows: list[shim_cost.Row]) -> None:
    """The torch ops one call dispatches (top-level aten ops, torch.profiler's CPU events: no mode,
    so the call takes its usual road): deterministic where the timings are not, and on a GPU each
    is ~4-6 us of host time, and a kernel unless a view."""
    from torch.profiler import ProfilerActivity, profile

    for name, fn, context in rows:
        with context():
            fn()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                fn()
        ops = [e.name.removeprefix("aten::") for e in prof.events()
               if e.name.startswith("aten::") and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))]
        print(f"{name:64s} {len(ops):3d} ops: {' '.join(ops)}")


if __name__ == "__main__":
    main()
