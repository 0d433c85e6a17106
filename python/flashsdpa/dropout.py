# dropout.py: the generator side of dropout (issue 14): the Philox seed and offset a dropout call
# of our kernels uses, taken from PyTorch's default CUDA generator exactly as PyTorch's flash
# kernel takes them (same amount consumed, same rng state tensors returned), in eager mode and
# under CUDA-graph capture. The mask itself is common/dropout.cuh's (reference_dropout.py on the host).
#
# Eager: the generator's (seed, offset) are read and its offset advanced by B * Hq * 32, what
# PyTorch's philox_cuda_state(B * Hq * 32) does for its flash kernel; the kernel gets the values
# and writes them into a fresh uint64[2] rng state (PyTorch's format). Three generator calls, ~1.5 us.
# Capture: the generator's offset is not readable while capturing (PyTorch asserts), and a graph
# replay must see the offset of the replay, not of the capture. PyTorch's own flash op resolves
# that on the device (its kernels read the graph's seed / offset pointers), so we let it: a call
# of PyTorch's aten::_flash_attention_forward kernel with dropout on a (B, 1, Hq, 8) dummy
# consumes exactly B * Hq * 32 (its counter_offset) and writes the resolved (seed, offset) into
# its rng state every replay; our kernel, next on the stream, reads them from there (params.h's
# seed_ptr / offset_ptr). Its cost: one 1-row attention launch of a few microseconds per replay.
"""The Philox seed / offset of a dropout call, from PyTorch's default CUDA generator."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = ["DropoutRng", "from_rng_state", "rng_state_reason", "take"]

_FLASH_FWD = "_flash_attention_forward"
_CUDA_KEYSET: Any = None
# FLASHSDPA_DROPOUT_RNG=torch: the capture-safe path in eager mode too (A/B, or a torch whose
# generator offset API disagrees with its philox_cuda_state; tests/gpu/test_dropout_gpu.py checks
# both paths against PyTorch's kernel). Read once, at import.
_ALWAYS_VIA_TORCH = os.environ.get("FLASHSDPA_DROPOUT_RNG", "").strip().lower() == "torch"


@dataclass(frozen=True)
class DropoutRng:
    """One call's dropout: ``item`` is module.cpp's spec.dropout (p, seed, offset, seed_ptr,
    offset_ptr, rng_state_ptr); ``philox_seed`` / ``philox_offset`` are the rng state tensors the
    flash ops return (uint64[2] = (seed, offset) and an unused uint64[]), which the backward reads."""

    item: tuple[float, int, int, int, int, int]
    philox_seed: Tensor
    philox_offset: Tensor


def _via_torch(p: float, batch: int, heads: int, device: torch.device, native: Any) -> DropoutRng:
    """The generator state through PyTorch's flash kernel on a dummy (capture-safe, see above).
    ``native``: PyTorch's own CUDA kernel of the op (routers.py captured it before registering
    ours); None: looked up, which is PyTorch's while no router of ours is registered there."""
    global _CUDA_KEYSET
    if native is None:
        native = torch.library.get_kernel(f"aten::{_FLASH_FWD}", "CUDA")
    if native is None:
        raise RuntimeError("flashsdpa: dropout under CUDA-graph capture needs PyTorch's flash kernel")
    if _CUDA_KEYSET is None:
        _CUDA_KEYSET = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    dummy = torch.empty(batch, 1, heads, 8, dtype=torch.float16, device=device)
    result = native.call_boxed(_CUDA_KEYSET, dummy, dummy, dummy, None, None, 1, 1, p, False, False)
    rng_state, unused = result[2], result[3]
    addr = rng_state.data_ptr()
    return DropoutRng((p, 0, 0, addr, addr + 8, 0), rng_state, unused)


def take(
    p: float, batch: int, heads: int, device: torch.device, native: Any = None, *, via_torch: bool | None = None
) -> DropoutRng:
    """Consume a dropout call's share of the device's default CUDA generator (B * Hq * 32, as
    PyTorch's flash kernel does) and return its state for our kernels. ``native``: see
    _via_torch. ``via_torch`` (tests): force the capture-safe path (True) or the eager one
    (False); None picks by capture status."""
    if via_torch is None:
        via_torch = _ALWAYS_VIA_TORCH or torch.cuda.is_current_stream_capturing()
    if via_torch:
        return _via_torch(p, batch, heads, device, native)
    index = device.index if device.index is not None else torch.cuda.current_device()
    gen = torch.cuda.default_generators[index]
    seed, offset = gen.initial_seed(), gen.get_offset()
    gen.set_offset(offset + batch * heads * 32)
    rng_state = torch.empty(2, dtype=torch.uint64, device=device)  # the forward kernel writes it
    unused = torch.empty((), dtype=torch.uint64, device=device)
    return DropoutRng((p, seed, offset, 0, 0, rng_state.data_ptr()), rng_state, unused)


def rng_state_reason(philox_seed: Any, device: torch.device) -> str | None:
    """Why a backward cannot read this rng state (PyTorch's flash format: a uint64[2] (seed,
    offset) tensor on the inputs' device), or None."""
    if not isinstance(philox_seed, Tensor) or philox_seed.dtype != torch.uint64 or philox_seed.numel() != 2:
        kind = (f"{philox_seed.dtype} {tuple(philox_seed.shape)}" if isinstance(philox_seed, Tensor)
                else type(philox_seed).__name__)  # fmt: skip
        return f"rng state {kind}: needs PyTorch's flash format, a uint64[2] (seed, offset) tensor"
    if philox_seed.device != device or not philox_seed.is_contiguous():
        return f"rng state on {philox_seed.device}: needs a contiguous tensor on {device}"
    return None


def from_rng_state(p: float, philox_seed: Tensor) -> tuple[float, int, int, int, int, int]:
    """spec.dropout of a backward: the forward's (seed, offset) read by the kernel from the rng
    state tensor on the device (no host sync; graph-safe, as PyTorch's backward reads it)."""
    addr = philox_seed.data_ptr()
    return (p, 0, 0, addr, addr + 8, 0)
