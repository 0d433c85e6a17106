# validation.py: the checks of packed-sequence (varlen) metadata, one predicate per argument.
#
# cu_seqlens_q / cu_seqlens_k / seqused_k / max_seqlen_q / max_seqlen_k decide which rows every
# program of the varlen kernels reads and writes, and max_seqlen_q sizes the grid, so bad values
# would read or write outside the tensors (issue 10, item 2). Their *structure* (dtype, rank,
# length, device) is metadata and always checked. Their *values* are checked wherever reading
# them costs no device-to-host synchronisation: tensors on the CPU always (the reference path),
# CUDA tensors only on request (FLASHSDPA_VALIDATE=1, set_enabled(True), or
# attention_varlen(..., validate=True)), because .tolist() of a CUDA tensor waits for the stream.
# Every message names the argument and the limit, as selection.py's reasons do.
"""Checks of varlen metadata (``cu_seqlens``, ``seqused_k``, ``max_seqlen``) for flashsdpa's ops."""

from __future__ import annotations

import os

import torch
from torch import Tensor

__all__ = ["ENABLED", "check_varlen", "is_enabled", "offsets_reason", "set_enabled", "values_reason"]

# Opt-in value checks of CUDA metadata (they synchronise the stream). Read once at import, so the
# hot path reads one module global; set_enabled() changes it at run time.
ENABLED: bool = os.environ.get("FLASHSDPA_VALIDATE", "0") not in ("", "0")


def set_enabled(enabled: bool) -> None:
    """Check the values of CUDA varlen metadata on every call (a device-to-host sync per call);
    the same as running with ``FLASHSDPA_VALIDATE=1``. Metadata on the CPU is always checked."""
    global ENABLED
    ENABLED = bool(enabled)


def is_enabled() -> bool:
    return ENABLED


def _offsets_structure(name: str, t: object, device: torch.device) -> str | None:
    if not isinstance(t, Tensor):
        return f"{name} must be a torch.Tensor, got {type(t).__name__}"
    if t.dtype != torch.int32:
        return f"{name}.dtype={t.dtype}: needs torch.int32"
    if t.dim() != 1:
        return f"{name}.dim()={t.dim()}: needs 1 (batch + 1 offsets)"
    if t.device != device:
        return f"{name}.device={t.device}: differs from query.device={device}"
    return None


def offsets_reason(
    cu_seqlens_q: Tensor, cu_seqlens_k: Tensor | None, seqused_k: Tensor | None, max_seqlen_q: int, max_seqlen_k: int,
    device: torch.device,
) -> str | None:  # fmt: skip
    """What is wrong with the metadata's structure (no value is read: never a sync), or None."""
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        reason = _offsets_structure(name, t, device)
        if reason is not None:
            return reason
    assert cu_seqlens_k is not None  # (the loop returned its "must be a torch.Tensor" otherwise)
    entries = cu_seqlens_q.shape[0]
    if entries < 2:
        return f"cu_seqlens_q has {entries} entries: needs batch + 1 >= 2"
    if cu_seqlens_k.shape[0] != entries:
        return f"cu_seqlens_k has {cu_seqlens_k.shape[0]} entries: needs {entries}, as many as cu_seqlens_q"
    if seqused_k is not None:
        reason = _offsets_structure("seqused_k", seqused_k, device)
        if reason is not None:
            return reason.replace("(batch + 1 offsets)", "(one length per sequence)")
        if seqused_k.shape[0] != entries - 1:
            return f"seqused_k has {seqused_k.shape[0]} entries: needs batch = {entries - 1}"
    for name, m in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(m, bool) or not isinstance(m, int) or m < 0:
            return f"{name}={m!r}: needs a non-negative int"
    return None


def _offsets_values_reason(name: str, offsets: list[int], rows_name: str, rows: int) -> str | None:
    if offsets[0] != 0:
        return f"{name}[0]={offsets[0]}: needs 0 (the first sequence starts at row 0)"
    for i in range(len(offsets) - 1):
        if offsets[i + 1] < offsets[i]:
            return (
                f"{name}[{i + 1}]={offsets[i + 1]} < {name}[{i}]={offsets[i]}: needs non-decreasing offsets "
                f"(sequence {i} would have a negative length)"
            )
    if offsets[-1] > rows:
        return f"{name}[-1]={offsets[-1]}: exceeds {rows_name}.size(0)={rows} (offsets past the packed rows)"
    return None


def _longest(offsets: list[int]) -> tuple[int, int]:
    """(length, index) of the longest sequence."""
    lengths = [b - a for a, b in zip(offsets, offsets[1:])]
    longest = max(lengths)
    return longest, lengths.index(longest)


def values_reason(
    cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, seqused_k: Tensor | None, max_seqlen_q: int, max_seqlen_k: int,
    total_q: int, total_k: int,
) -> str | None:  # fmt: skip
    """What is wrong with the metadata's values (reads them: a sync for CUDA tensors), or None.
    The structure must have passed offsets_reason()."""
    offsets_q, offsets_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for name, offsets, rows_name, rows in (
        ("cu_seqlens_q", offsets_q, "query", total_q),
        ("cu_seqlens_k", offsets_k, "key", total_k),
    ):
        reason = _offsets_values_reason(name, offsets, rows_name, rows)
        if reason is not None:
            return reason
    lengths_k = [b - a for a, b in zip(offsets_k, offsets_k[1:])]
    if seqused_k is not None:
        for i, (used, length) in enumerate(zip(seqused_k.tolist(), lengths_k)):
            if not 0 <= used <= length:
                return (
                    f"seqused_k[{i}]={used}: needs 0 <= seqused_k[{i}] <= {length}, the length of key sequence {i} "
                    f"(cu_seqlens_k[{i + 1}] - cu_seqlens_k[{i}])"
                )
        offsets_k = [0]
        for used in seqused_k.tolist():
            offsets_k.append(offsets_k[-1] + used)
    for name, offsets, m, side in (
        ("max_seqlen_q", offsets_q, max_seqlen_q, "query"),
        ("max_seqlen_k", offsets_k, max_seqlen_k, "key"),
    ):
        longest, index = _longest(offsets)
        if m < longest:
            return f"{name}={m}: needs at least {longest}, the length of the longest {side} sequence ({index})"
    return None


def check_varlen(
    query: Tensor, key: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor | None, seqused_k: Tensor | None,
    max_seqlen_q: int, max_seqlen_k: int, *, values: bool | None = None,
) -> None:  # fmt: skip
    """Raise ValueError naming the argument and the limit when the varlen metadata is bad.

    The structure is always checked. ``values``: True reads the offsets (a sync on CUDA), False
    never does, None (the default) reads them where that is free (CPU tensors) or requested
    (FLASHSDPA_VALIDATE=1 / set_enabled(True)); never for tensors without data (fake, meta).
    """
    reason = offsets_reason(cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, query.device)
    if reason is None:
        if values is None:
            device = cu_seqlens_q.device.type
            values = device == "cpu" or (ENABLED and device == "cuda")
        if values and cu_seqlens_k is not None and _has_data(cu_seqlens_q):  # (not None: offsets_reason)
            reason = values_reason(
                cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, query.shape[0], key.shape[0]
            )
    if reason is not None:
        raise ValueError(reason)


def _has_data(t: Tensor) -> bool:
    # FakeTensors (torch.compile's tracing, the fake impls) and meta tensors carry no values.
    if t.device.type == "meta":
        return False
    from torch._subclasses.fake_tensor import is_fake

    return not is_fake(t)
