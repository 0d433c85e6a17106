# _backend.py: the one door to the compiled module flashsdpa._C.
#
# Loads _C (or records why it cannot), keeps what it reports about the build and each GPU, and
# turns torch tensors into the pointer/stride arguments of _C.fwd / _C.bwd. Everything per call
# sits on the SDPA hot path (budget: a few microseconds over PyTorch's own kernel), so the build
# facts are module constants, device facts are cached per device index, and nothing synchronizes.
"""Loading of ``flashsdpa._C`` and the tensor-to-pointer launch wrappers."""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch import Tensor

try:
    _C: Any = importlib.import_module("flashsdpa._C")
except ImportError as _exc:  # absent (not built) or unloadable: the package still imports
    _C = None
    IMPORT_ERROR: str | None = f"{type(_exc).__name__}: {_exc}"
else:
    IMPORT_ERROR = None


MAX_HEAD_DIM = 256

_NO_BUILD: dict[str, Any] = {
    "version": None,
    "with_cuda": False,
    "cuda_version": None,
    "archs": [],
    "dtypes": [],
    "head_dims": [],
    "kernel_families": [],
    "max_head_dim": MAX_HEAD_DIM,
}

_DTYPE_BY_NAME = {"float16": torch.float16, "bfloat16": torch.bfloat16}
_CODE_BY_DTYPE = {torch.float16: 0, torch.bfloat16: 1}  # flashsdpa::DType in params.h

# Module state derived from _C by _configure(). Other modules read it as _backend.NAME (never
# `from _backend import NAME`), so that tests can swap in a fake _C and every reader follows.
BUILD_INFO: dict[str, Any]
CUDA_KERNELS: bool  # _C exists and was built with CUDA kernels
UNAVAILABLE_REASON: str | None  # why not, in explain()'s words; None when CUDA_KERNELS
DTYPE_CODES: dict[torch.dtype, int]  # element types with compiled kernels -> _C's dtype code
HEAD_DIM_PAIRS: frozenset[tuple[int, int]]  # every (head_dim_qk, head_dim_v) a compiled bucket serves
_DEVICE_INFO: dict[int, dict[str, Any]] = {}
_DEVICE_REASON: dict[int, str | None] = {}
_DEVICE_OK: dict[int, bool] = {}  # device index -> our kernels run there; the hot path reads only this
_BWD_REASON: dict[tuple[int, int, int], str | None] = {}  # (device, head_dim_qk, head_dim_v) -> why no backward


def _configure(module: Any, import_error: str | None = None) -> None:
    """(Re)derive the module state from a _C module (or None). Called once at import; tests call it
    with a stand-in module to exercise the selection and the routers without a GPU."""
    global _C, IMPORT_ERROR, BUILD_INFO, CUDA_KERNELS, UNAVAILABLE_REASON, DTYPE_CODES, HEAD_DIM_PAIRS
    _C, IMPORT_ERROR = module, import_error
    BUILD_INFO = dict(module.build_info()) if module is not None else dict(_NO_BUILD)
    CUDA_KERNELS = bool(BUILD_INFO["with_cuda"])
    if module is None:
        UNAVAILABLE_REASON = f"flashsdpa._C could not be imported ({import_error}); build it with pip install -e ."
    elif not CUDA_KERNELS:
        UNAVAILABLE_REASON = "flashsdpa._C was built without CUDA (no nvcc at build time)"
    else:
        UNAVAILABLE_REASON = None
    DTYPE_CODES = {
        _DTYPE_BY_NAME[name]: _CODE_BY_DTYPE[_DTYPE_BY_NAME[name]]
        for name in BUILD_INFO["dtypes"]
        if CUDA_KERNELS and name in _DTYPE_BY_NAME
    }
    # Asked of _C once (32 x 32 calls, well under a millisecond): a frozenset lookup is the
    # cheapest per-call test, and plain Python data that torch.compile can trace.
    dims = range(8, MAX_HEAD_DIM + 1, 8)
    HEAD_DIM_PAIRS = frozenset(
        (dqk, dv) for dqk in dims for dv in dims if CUDA_KERNELS and module.head_dim_bucket(dqk, dv) != 0
    )
    _DEVICE_INFO.clear()
    _DEVICE_REASON.clear()
    _DEVICE_OK.clear()
    _BWD_REASON.clear()


_configure(_C, IMPORT_ERROR)


def build_info() -> dict[str, Any]:
    """What this build of ``flashsdpa._C`` contains (a copy; see ``_C.build_info``), plus
    ``import_error`` (why ``_C`` could not be imported, or None)."""
    info = dict(BUILD_INFO)
    info["import_error"] = IMPORT_ERROR
    return info


# ---- per-device facts, cached --------------------------------------------------------------------


def device_info(index: int) -> dict[str, Any]:
    """``_C.device_info(index)``, cached (name, major, minor, sms, smem_optin_bytes, family)."""
    info = _DEVICE_INFO.get(index)
    if info is None:
        if _C is None:
            raise RuntimeError(UNAVAILABLE_REASON)
        info = _DEVICE_INFO[index] = dict(_C.device_info(index))
    return info


def device_reason(index: int) -> str | None:
    """Why our kernels cannot run on CUDA device ``index``, or None when they can (cached)."""
    if index in _DEVICE_REASON:
        return _DEVICE_REASON[index]
    if not CUDA_KERNELS:
        reason: str | None = UNAVAILABLE_REASON
    elif (reason := _device_error(index)) is not None:
        pass
    else:
        info = device_info(index)
        capability = f"{info['major']}.{info['minor']}"
        if info["family"] is not None:
            reason = None
        elif info["major"] < 8:
            reason = f"GPU compute capability {capability}: needs 8.0 or newer"
        else:
            reason = (
                f"GPU compute capability {capability} ({info['name']}): this build has no kernel for it "
                f"(archs {BUILD_INFO['archs']}); rebuild with FLASHSDPA_ARCHS including "
                f"{info['major']}{info['minor']}"
            )
    _DEVICE_REASON[index] = reason
    _DEVICE_OK[index] = reason is None
    return reason


def _device_error(index: int) -> str | None:
    """Why _C cannot query CUDA device ``index`` at all (no driver, a driver older than the CUDA
    runtime _C links, no such device), or None. explain() and info must report this, not raise."""
    try:
        device_info(index)
    except RuntimeError as exc:
        return f"no usable GPU (device {index}): {exc}"
    return None


def device_ok(index: int) -> bool:
    """True when our kernels run on CUDA device ``index``; one dict lookup after the first call."""
    ok = _DEVICE_OK.get(index)
    if ok is None:
        ok = device_reason(index) is None
    return ok


def backward_reason(index: int, head_dim_qk: int, head_dim_v: int) -> str | None:
    """Why our backward cannot run these head dims on CUDA device ``index`` although the forward
    can, or None (cached). The backward's tiles need the most shared memory: parts with less per
    block than an H100 (A100: 163 KB, RTX 30xx/40xx: 99 KB) get smaller tiles, and the largest head
    dims fit none there. The caller has checked the device and the head dims otherwise."""
    key = (index, head_dim_qk, head_dim_v)
    if key in _BWD_REASON:
        return _BWD_REASON[key]
    reason = None
    if _C.bwd_smem_bytes(head_dim_qk, head_dim_v, index) == 0:
        info = device_info(index)
        reason = (
            f"head_dim={head_dim_qk} (value {head_dim_v}) backward on {info['name']}: no backward tile fits its "
            f"{info['smem_optin_bytes'] // 1024} KB of shared memory per block"
        )
    _BWD_REASON[key] = reason
    return reason


def prime_devices() -> None:
    """Query every visible GPU now, so later checks are pure dict reads (torch.compile traces them)."""
    if CUDA_KERNELS and torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            device_reason(index)


# ---- launch wrappers -----------------------------------------------------------------------------


def rows_aligned(t: Tensor, row_dims: tuple[int, ...]) -> bool:
    """Whether every row of ``t`` (indexed by ``row_dims``) starts on a 16-byte boundary, as the
    kernels' 16-byte cp.async loads need: storage offset and strides multiples of 8 elements."""
    stride = t.stride()
    bits = t.storage_offset()
    for d in row_dims:
        bits |= stride[d]
    return bits & 7 == 0


def aligned_rows(t: Tensor) -> Tensor:
    """``t`` itself if its rows have unit stride and start on 16-byte boundaries, else a
    contiguous copy. For gradients, which arrive in whatever layout autograd made (``out.sum()``
    gives stride 0 everywhere); PyTorch's own flash backward copies those too."""
    if t.stride(-1) == 1 and rows_aligned(t, tuple(range(t.dim() - 1))):
        return t
    return t.clone(memory_format=torch.contiguous_format)


def _public_current_stream(index: int) -> int:
    return torch.cuda.current_stream(index).cuda_stream


# The current CUDA stream of a device as an int. torch._C._cuda_getCurrentRawStream is what
# Inductor's generated code calls: no Stream object, and bound here directly rather than behind a
# wrapper function (a Python call saved per launch). torch.cuda.current_stream is the public
# spelling, kept for builds without it.
_current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", _public_current_stream)

# The launch wrappers pass Tensor.stride() whole: _C reads the first three items (batch, head,
# row) of a tuple of three or more, and a [:3] slice per tensor cost Python ~45 ns (4 per
# forward, 8 per backward), on top of _C's old tuple-to-array conversion (~100 ns per stride
# argument; CPU timings, see scripts/dev/overhead_probe.py for the GPU's).


_NO_LSE_STRIDES = (0, 0, 0)


def launch_fwd(
    q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor | None, scale: float, causal: int
) -> None:
    """Forward on dense (B, H, S, D) views: writes ``out`` (B, Hq, Sq, Dv) and ``lse`` (B, Hq, Sq),
    or no LSE when ``lse`` is None (inference: nothing will read it, and its allocation is a
    tenth of the host time of a small call).

    Callers have checked the problem (``selection.dense_reason``) and that it is non-empty.
    """
    batch, heads_q, seqlen_q, head_dim_qk = q.shape
    _, heads_kv, seqlen_k, head_dim_v = v.shape  # one unpack: three v.shape[i] reads cost 2.5x as much
    device = q.get_device()
    _C.fwd(
        q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), 0 if lse is None else lse.data_ptr(),
        q.stride(), k.stride(), v.stride(), out.stride(), _NO_LSE_STRIDES if lse is None else lse.stride(),
        batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim_qk, head_dim_v,
        0, 0, 0,
        scale, causal, DTYPE_CODES[q.dtype], device, _current_stream(device),
    )  # fmt: skip


def _packed_strides(t: Tensor) -> tuple[int, int, int]:
    # (total, H, D) rows: no batch stride (cu_seqlens selects the rows), head then row stride.
    stride = t.stride()
    return (0, stride[1], stride[0])


def _packed_lse_strides(lse: Tensor) -> tuple[int, int, int]:
    # Varlen LSE is (H, total): head stride, then row stride.
    stride = lse.stride()
    return (0, stride[0], stride[1])


def launch_fwd_varlen(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    seqused_k: Tensor | None,
    max_seqlen_q: int,
    max_seqlen_k: int,
    scale: float,
    causal: int,
) -> None:
    """Forward on packed (total, H, D) rows; ``lse`` is (H, total_q); cu_seqlens are int32 (B + 1)."""
    device = q.get_device()
    _C.fwd(
        q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
        _packed_strides(q), _packed_strides(k), _packed_strides(v), _packed_strides(out), _packed_lse_strides(lse),
        cu_seqlens_q.shape[0] - 1, q.shape[1], k.shape[1], max_seqlen_q, max_seqlen_k, q.shape[2], v.shape[2],
        cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr(), 0 if seqused_k is None else seqused_k.data_ptr(),
        scale, causal, DTYPE_CODES[q.dtype], device, _current_stream(device),
    )  # fmt: skip


def _workspace(sizes: tuple[int, int], like: Tensor) -> tuple[Tensor, Tensor]:
    """The backward's dq_accum and delta buffers, from the caching allocator (stream-ordered,
    CUDA-graph friendly). Two allocations, as PyTorch's flash backward makes: see api.cpp's
    WorkspaceLayout for the 1 MiB one buffer cost. The kernels zero what they need, so no fill
    launch; blocks are 512-byte aligned, more than the 256 _C asks for."""
    return (
        torch.empty(sizes[0], dtype=torch.uint8, device=like.device),
        torch.empty(sizes[1], dtype=torch.uint8, device=like.device),
    )


def launch_bwd(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    dq: Tensor,
    dk: Tensor,
    dv: Tensor,
    scale: float,
    causal: int,
) -> None:
    """Backward on dense (B, H, S, D) views: writes ``dq``, ``dk``, ``dv``."""
    batch, heads_q, seqlen_q, head_dim_qk = q.shape
    _, heads_kv, seqlen_k, head_dim_v = v.shape
    device = q.get_device()
    sizes = _C.bwd_workspace_bytes(batch, heads_q, seqlen_q, head_dim_qk, head_dim_v, -1)
    dq_accum, delta = _workspace(sizes, q)
    _C.bwd(
        dout.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
        dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
        dout.stride(), q.stride(), k.stride(), v.stride(), out.stride(), lse.stride(),
        dq.stride(), dk.stride(), dv.stride(),
        batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim_qk, head_dim_v,
        0, 0, 0,
        scale, causal, DTYPE_CODES[q.dtype], dq_accum.data_ptr(), sizes[0], delta.data_ptr(), sizes[1], -1, device,
        _current_stream(device),
    )  # fmt: skip


def launch_bwd_varlen(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    dq: Tensor,
    dk: Tensor,
    dv: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    seqused_k: Tensor | None,
    max_seqlen_q: int,
    max_seqlen_k: int,
    scale: float,
    causal: int,
) -> None:
    """Backward on packed (total, H, D) rows; ``lse`` is (H, total_q)."""
    batch, heads_q, total_q = cu_seqlens_q.shape[0] - 1, q.shape[1], q.shape[0]
    head_dim_qk, head_dim_v = q.shape[2], v.shape[2]
    device = q.get_device()
    sizes = _C.bwd_workspace_bytes(batch, heads_q, max_seqlen_q, head_dim_qk, head_dim_v, total_q)
    dq_accum, delta = _workspace(sizes, q)
    _C.bwd(
        dout.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
        dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
        _packed_strides(dout), _packed_strides(q), _packed_strides(k), _packed_strides(v), _packed_strides(out),
        _packed_lse_strides(lse), _packed_strides(dq), _packed_strides(dk), _packed_strides(dv),
        batch, heads_q, k.shape[1], max_seqlen_q, max_seqlen_k, head_dim_qk, head_dim_v,
        cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr(), 0 if seqused_k is None else seqused_k.data_ptr(),
        scale, causal, DTYPE_CODES[q.dtype], dq_accum.data_ptr(), sizes[0], delta.data_ptr(), sizes[1], total_q,
        device, _current_stream(device),
    )  # fmt: skip
