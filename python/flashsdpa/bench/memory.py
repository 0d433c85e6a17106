# bench/memory.py: peak memory above the inputs, the bar being PyTorch's flash backend's.
"""Peak extra memory of one backend during a forward and a forward + backward."""

from __future__ import annotations

from typing import Any

import torch

from flashsdpa.bench.problems import Problem
from flashsdpa.bench.timing import UNSUPPORTED, backend_context, forward, input_sets, unsupported_status


def peak_extra_mib(backend: str, problem: Problem, dtype: torch.dtype, layout: str) -> dict[str, Any]:
    """Peak memory above the inputs (q, k, v, dout) during a forward, and during forward + backward."""
    row: dict[str, Any] = {
        "backend": backend,
        "head_dim": problem.head_dim,
        "seqlen": problem.seqlen,
        "batch": problem.batch,
        "heads": problem.heads,
        "fwd_mib": None,
        "fwd_bwd_mib": None,
    }
    ((q, k, v, dout),) = input_sets(problem, dtype, layout, 1)
    try:
        with backend_context(backend):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            out = forward(backend, q, k, v, problem.causal)
            torch.cuda.synchronize()
            row["fwd_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
            grads = torch.autograd.grad(out, (q, k, v), dout)
            torch.cuda.synchronize()
            row["fwd_bwd_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
            del out, grads
    except torch.OutOfMemoryError:
        row["status"] = "OOM"
    except UNSUPPORTED as exc:
        row["status"] = unsupported_status(exc)
    else:
        row["status"] = "ok"
    del q, k, v, dout
    torch.cuda.empty_cache()
    return row
