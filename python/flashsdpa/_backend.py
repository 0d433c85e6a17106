# _backend.py: the one door to the compiled module flashsdpa._C.
#
# Loads _C (or records why it cannot), keeps what it reports about the build, its kernel families
# (the capability table) and each GPU, and turns torch tensors into the spec tuples of _C.fwd /
# _C.bwd (backend/src/module.cpp's fwd_spec / bwd_spec). Everything per call
# sits on the SDPA hot path (budget: a few microseconds over PyTorch's own kernel), so the build
# facts are module constants, device facts are cached per device index, and nothing synchronizes.
# Over 500 lines: it is the only module that calls _C, and each of _C's calls (select, fwd, bwd,
# decode_plan, fwd_workspace_bytes, capabilities) has its spec builder and its cache here; split
# apart, every launch would import a second module on the hot path for the shared spec helpers.
"""Loading of ``flashsdpa._C`` and the tensor-to-pointer launch wrappers."""

from __future__ import annotations

import importlib
from typing import Any

from flashsdpa import masks
from flashsdpa.masks import MaskSpec

import torch
from torch import Tensor

try:
    _C: Any = importlib.import_module("flashsdpa._C")
except ImportError as _exc:  # absent (not built) or unloadable: the package still imports
    _C = None
    IMPORT_ERROR: str | None = f"{type(_exc).__name__}: {_exc}"
else:
    IMPORT_ERROR = None


MAX_HEAD_DIM = 512  # params.h's kMaxHeadDim: which family and direction take a head dim is the table's
# Head dims every family serves in both directions wherever it runs (also PyTorch's flash limit);
# above it only the table's wide buckets (the sm90 forward's 512), decided per problem.
WIDE_HEAD_DIM = 256

_NO_BUILD: dict[str, Any] = {"version": None, "with_cuda": False, "cuda_version": None, "archs": [], "dtypes": [],
                             "head_dims": [], "kernel_families": [], "max_head_dim": MAX_HEAD_DIM}

_DTYPE_BY_NAME = {"float16": torch.float16, "bfloat16": torch.bfloat16}
_CODE_BY_DTYPE = {torch.float16: 0, torch.bfloat16: 1}  # flashsdpa::DType in params.h

# Module state derived from _C by _configure(). Other modules read it as _backend.NAME (never
# `from _backend import NAME`), so that tests can swap in a fake _C and every reader follows.
BUILD_INFO: dict[str, Any]
CAPABILITIES: list[dict[str, Any]]  # _C's table: one dict per compiled kernel family
CAPABILITIES_REASON: str | None  # why CAPABILITIES is empty, else None
CUDA_KERNELS: bool  # _C exists and was built with at least one CUDA kernel family
UNAVAILABLE_REASON: str | None  # why not, in explain()'s words; None when CUDA_KERNELS
DTYPE_CODES: dict[torch.dtype, int]  # element types with compiled kernels -> _C's dtype code
HEAD_DIM_PAIRS: frozenset[tuple[int, int]]  # every (head_dim_qk, head_dim_v) some family's bucket serves
_DEVICE_INFO: dict[int, dict[str, Any]] = {}
_DEVICE_REASON: dict[int, str | None] = {}
_DEVICE_OK: dict[int, bool] = {}  # device index -> our kernels run there; the hot path reads only this
_BWD_REASON: dict[tuple[int, int, int], str | None] = {}  # (device, head_dim_qk, head_dim_v) -> why no backward
# (device, dtype code, head_dim_qk, head_dim_v, mask kind, layout, backward, feature bits) -> _C.select's
# verdict: (family or None, head-dim bucket, tile, shared memory bytes, reasons or None). layout: 0
# dense, 1 varlen (callers pass the bool), 2 decode; backward: 0, 1, 2 deterministic.
_SELECT: dict[tuple[int, int, int, int, int, int, int, int], tuple[Any, ...]] = {}
# (device, dtype code, spec sizes, mask, kv_cache, forced splits[, feature bits]) -> what a decode launch of that
# problem needs, from _C.decode_plan once: (num_splits, o_accum_bytes, lse_accum_bytes, LSE offset
# in the workspace, workspace bytes), or the plan's reasons (a str) where no decode kernel serves
# it. One flat lookup a call, keyed on the spec's own sizes tuple and the mask as given (no
# re-slicing, no mask-kind call: session 9). Bounded: a dense decode loop grows seqlen_k by one per
# token, a new key each step. Feature bits (a masked call's bias): in the key only when nonzero.
_DECODE: dict[tuple[Any, ...], tuple[int, int, int, int, int] | str] = {}
_DECODE_CACHE_SIZE = 4096
# (device, dtype code, spec sizes, mask, plain?, no dropout?) -> the forward kernel's workspace bytes
# (_C.fwd_workspace_bytes: the sm90 family's dynamic-schedule counter or split tail; 0 = none),
# asked once per problem; bounded as _DECODE.
_FWD_WS: dict[tuple[Any, ...], int] = {}
LAYOUT_DECODE = 2
# Dense calls with at most this many query rows ask for the decode kernel (_C's
# DECODE_MAX_SEQLEN_Q, the rule's home; a plain int here so the per-call test is one compare).
DECODE_MAX_SEQLEN_Q = 16
MAX_SPLITS = 128  # _C's MAX_SPLITS

# Issue 14's score modifiers as _C's feature bits (capabilities.h's Feature) and the names the
# capability table lists them by.
FEATURE_BITS = {"softcap": 1, "alibi": 2, "sinks": 4, "bias": 8, "dropout": 16}


def _configure(module: Any, import_error: str | None = None) -> None:
    """(Re)derive the module state from a _C module (or None). Called once at import; tests call it
    with a stand-in module to exercise the selection and the routers without a GPU."""
    global _C, IMPORT_ERROR, BUILD_INFO, CUDA_KERNELS, UNAVAILABLE_REASON, DTYPE_CODES, HEAD_DIM_PAIRS
    global CAPABILITIES, CAPABILITIES_REASON
    _C, IMPORT_ERROR = module, import_error
    BUILD_INFO = dict(module.build_info()) if module is not None else dict(_NO_BUILD)
    table = module.capabilities() if module is not None else {"families": [], "reason": None}
    CAPABILITIES = [dict(f) for f in table["families"]]
    CUDA_KERNELS = bool(BUILD_INFO["with_cuda"]) and bool(CAPABILITIES)
    if module is None:
        UNAVAILABLE_REASON = f"flashsdpa._C could not be imported ({import_error}); build it with pip install -e ."
    elif not CUDA_KERNELS:
        UNAVAILABLE_REASON = table["reason"] or "flashsdpa._C was built without CUDA (no nvcc at build time)"
    else:
        UNAVAILABLE_REASON = None
    CAPABILITIES_REASON = UNAVAILABLE_REASON
    # The union over families, for the per-call fast tests (frozenset and dict lookups, plain Python
    # data that torch.compile can trace). Exact while every family that runs on a device serves
    # none/causal masks in both layouts (today: sm80 serves everything on every device it runs on);
    # the launch makes the exact per-problem choice in C++ and windows ask select() below.
    DTYPE_CODES = {
        _DTYPE_BY_NAME[name]: _CODE_BY_DTYPE[_DTYPE_BY_NAME[name]]
        for family in CAPABILITIES
        for name in family["dtypes"]
        if name in _DTYPE_BY_NAME
    }
    # Head dims up to 256 run in buckets every family has in both directions; above it only in the
    # wide buckets (the sm90 forward's 512), which do not stand in for a missing 192 or 256.
    buckets = {d for f in CAPABILITIES for d in f["head_dims"]}
    narrow, wide = max((d for d in buckets if d <= WIDE_HEAD_DIM), default=0), max(buckets, default=0)
    dims = range(8, wide + 1, 8)
    HEAD_DIM_PAIRS = frozenset(
        (dqk, dv) for dqk in dims for dv in dims if max(dqk, dv) <= narrow or max(dqk, dv) > WIDE_HEAD_DIM
    )
    global DECODE_MAX_SEQLEN_Q, MAX_SPLITS
    DECODE_MAX_SEQLEN_Q = int(getattr(module, "DECODE_MAX_SEQLEN_Q", 0)) if CUDA_KERNELS else 0
    MAX_SPLITS = int(getattr(module, "MAX_SPLITS", 128))
    _SELECT.clear()
    _DECODE.clear()
    _FWD_WS.clear()
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


class Capabilities(list):  # type: ignore[type-arg]
    """flashsdpa.capabilities(): a list with one dict per compiled kernel family, and ``reason``:
    why the list is empty (a CPU-only build, no _C), else None."""

    reason: str | None


def capabilities() -> Capabilities:
    """The capability table of this build: one dict per compiled kernel family (``family``,
    ``runs_on`` and ``min_capability`` / ``max_capability``, ``archs``, ``dtypes`` ("float16",
    "bfloat16"), ``head_dims`` (the family's buckets), ``head_dims_by_direction`` (the buckets each
    direction serves, {"forward": [...], "backward": [...]}) and ``head_dim_rule``, ``masks`` ("none", "causal_top_left",
    "causal_bottom_right", "window"), ``layouts`` (the forward's: "dense", "varlen", "decode") and
    ``layouts_by_direction``, ``directions``
    ("forward", "backward"), ``features`` (the score modifiers either direction serves: "softcap",
    "alibi", "sinks") and ``features_by_direction``, ``smem_per_tile``), in the order the launcher
    prefers them. One GPU may use two
    families: each call takes the first that serves it. ``.reason`` says why there is none."""
    table = Capabilities(dict(f) for f in CAPABILITIES)
    table.reason = CAPABILITIES_REASON
    return table


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


def select(index: int, dtype_code: int, head_dim_qk: int, head_dim_v: int, mask_kind: int, varlen: int,
           backward: int, features: int = 0) -> tuple[Any, ...]:
    """The capability table's verdict for one problem on CUDA device ``index``: (family or None,
    head-dim bucket, tile, shared memory bytes, reasons or None); ``_C.select``, cached.
    ``varlen``: the layout, False/0 dense, True/1 varlen, 2 decode (``LAYOUT_DECODE``).
    ``backward``: False/0 forward, True/1 backward, 2 deterministic backward (``BACKWARD_DETERMINISTIC``).
    ``features``: FEATURE_BITS of the score modifiers the call uses."""
    key = (index, dtype_code, head_dim_qk, head_dim_v, mask_kind, int(varlen), int(backward), features)
    verdict = _SELECT.get(key)
    if verdict is None:
        args = (index, dtype_code, head_dim_qk, head_dim_v, mask_kind, varlen, backward)
        verdict = _SELECT[key] = tuple(_C.select(*args, features) if features else _C.select(*args))
    return verdict


def backward_reason(index: int, head_dim_qk: int, head_dim_v: int) -> str | None:
    """Why our backward cannot run these head dims on CUDA device ``index`` although the forward
    can, or None (cached). The backward's tiles need the most shared memory: parts with less per
    block than an H100 (A100: 163 KB, RTX 30xx/40xx: 99 KB) get smaller tiles, and the largest head
    dims fit none there. The caller has checked the device and the head dims otherwise."""
    key = (index, head_dim_qk, head_dim_v)
    if key in _BWD_REASON:
        return _BWD_REASON[key]
    reason = None
    code = next(iter(DTYPE_CODES.values()), 0)  # tiles are the same for both dtypes
    family, *_, why = select(index, code, head_dim_qk, head_dim_v, 0, False, True)
    if family is None:
        info = device_info(index)
        reason = f"head_dim={head_dim_qk} (value {head_dim_v}) backward on {info['name']}: {why}"
    _BWD_REASON[key] = reason
    return reason


# _C.select's `backward` for a backward under torch.use_deterministic_algorithms(True): the table
# then offers only a family whose backward is bitwise reproducible (sm90: ordered dQ adds).
BACKWARD_DETERMINISTIC = 2


def deterministic_reason(q: Tensor, v: Tensor, mask: MaskSpec, varlen: bool, features: int = 0) -> str | None:
    """Under torch.use_deterministic_algorithms(True): why no family of ours runs this backward
    deterministically on q's device (the table's reasons), or None when one does (cached per problem
    through select). None as well when the flag is off."""
    if not torch.are_deterministic_algorithms_enabled():
        return None
    index = q.get_device()
    family, *_, why = select(index, DTYPE_CODES[q.dtype], q.shape[-1], v.shape[-1], masks.kind(mask), varlen,
                             BACKWARD_DETERMINISTIC, features)  # fmt: skip
    if family is not None:
        return None
    return f"torch.use_deterministic_algorithms(True): no deterministic backward of ours serves this call ({why})"


def decode_plan(index: int, dtype_code: int, sizes: tuple[int, ...], mask_kind: int, kv_cache: bool,
                num_splits: int, features: int = 0) -> tuple[Any, ...]:
    """The decode path's plan for one call (``_C.decode_plan``, not cached: launches read
    decode_layout's cache): (family or None, num_splits, o_accum_bytes, lse_accum_bytes, reasons or
    None). ``sizes`` = (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim_qk, head_dim_v);
    shapes only, never a device read. ``features``: FEATURE_BITS, checked against the decode path's."""
    args = (index, dtype_code, sizes, mask_kind, kv_cache, num_splits)
    return tuple(_C.decode_plan(*args, features) if features else _C.decode_plan(*args))


def decode_layout(index: int, dtype_code: int, sizes: tuple[int, ...], mask: MaskSpec, kv_cache: bool,
                  num_splits: int, features: int = 0) -> tuple[int, int, int, int, int] | str:
    """What a decode launch needs (cached per problem, ``_DECODE``): (num_splits, o_accum_bytes,
    lse_accum_bytes, LSE offset, workspace bytes), the split partials' workspace being one
    allocation, float32 outputs first, then the LSEs at a 256-byte boundary; or, where no decode
    kernel serves the call, the plan's reasons. ``sizes``: the spec's (its first 7 items are
    decode_plan's)."""
    key = (index, dtype_code, sizes, mask, kv_cache, num_splits) + ((features,) if features else ())
    layout = _DECODE.get(key)
    if layout is None:
        family, splits, o_bytes, lse_bytes, reasons = decode_plan(
            index, dtype_code, tuple(sizes[:7]), masks.kind(mask), kv_cache, num_splits, features
        )  # fmt: skip
        if family is None:
            layout = str(reasons)
        else:
            o_padded = (o_bytes + 255) // 256 * 256 if splits > 1 else 0
            layout = (splits, o_bytes, lse_bytes, o_padded, o_padded + lse_bytes if splits > 1 else 0)
        if len(_DECODE) >= _DECODE_CACHE_SIZE:
            _DECODE.clear()
        _DECODE[key] = layout
    return layout


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

# Varlen arguments of a launch: (cu_seqlens_q, cu_seqlens_k, seqused_k or None, max_seqlen_q, max_seqlen_k).
Varlen = tuple[Tensor, Tensor, "Tensor | None", int, int]

# Score modifiers of a launch: (softcap, alibi_slopes, sinks[, bias]); the tensors float32 and
# contiguous, slopes (Hq,) or (B, Hq), sinks (Hq,), on the query's device (ops.py converts them);
# bias (an additive attn_mask): a (B, Hq, Sq, Sk) view in the query's dtype, unit key stride, 0
# strides where it broadcasts (ops_masks.py builds it).
Mods = tuple[Any, ...]


def feature_bits(mods: Mods | None) -> int:
    """FEATURE_BITS of a launch's modifiers (0: none)."""
    if mods is None:
        return 0
    softcap, slopes, sinks = mods[:3]
    bias = mods[3] if len(mods) > 3 else None
    return ((1 if softcap > 0 else 0) | (2 if slopes is not None else 0) | (4 if sinks is not None else 0)
            | (8 if bias is not None else 0))  # fmt: skip


def _mods_item(mods: Mods) -> tuple[Any, ...]:
    """module.cpp's spec.mods: (softcap, alibi_slopes, alibi_batch_stride, sinks[, bias,
    bias_batch_stride, bias_head_stride, bias_row_stride[, bias_cells, its batch, head, row byte
    strides]]); the cells (ops_masks.bias_cells) are the optional fifth item of mods."""
    softcap, slopes, sinks = mods[:3]
    slopes_ptr = 0 if slopes is None else slopes.data_ptr()
    batch_stride = 0 if slopes is None or slopes.dim() == 1 else slopes.stride(0)
    item: tuple[float | int, ...] = (float(softcap), slopes_ptr, batch_stride, 0 if sinks is None else sinks.data_ptr())
    bias = mods[3] if len(mods) > 3 else None
    if bias is None:
        return item
    sb, sh, sr, _ = bias.stride()
    item = (*item, bias.data_ptr(), sb, sh, sr)
    cells = mods[4] if len(mods) > 4 else None
    if cells is None:
        return item
    bb, hb, qc, _ = cells.shape
    cb, ch, cr, _ = cells.stride()
    return (*item, cells.data_ptr(), cb if bb > 1 else 0, ch if hb > 1 else 0, cr if qc > 1 else 0)


def _packed_strides(t: Tensor) -> tuple[int, int, int]:
    # (total, H, D) rows: no batch stride (cu_seqlens selects the rows), head then row stride.
    stride = t.stride()
    return (0, stride[1], stride[0])


def _packed_lse_strides(lse: Tensor) -> tuple[int, int, int]:
    # Varlen LSE is (H, total): head stride, then row stride.
    stride = lse.stride()
    return (0, stride[0], stride[1])


def _spec(
    q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor | None, scale: float, mask: MaskSpec,
    varlen: Varlen | None,
) -> tuple[Any, ...]:
    """The forward spec of _C (module.cpp's fwd_spec): (pointers, strides, sizes, mask, scale,
    dtype, device, stream), for dense (B, H, S, D) views or, with ``varlen``, packed (total, H, D)
    rows. Plain tuples: the cheapest object Python builds and C++ reads in place."""
    device = q.get_device()
    stream = _current_stream(device)
    if varlen is None:
        batch, heads_q, seqlen_q, head_dim_qk = q.shape
        _, heads_kv, seqlen_k, head_dim_v = v.shape  # one unpack: three v.shape[i] reads cost 2.5x as much
        pointers = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), 0 if lse is None else lse.data_ptr(),
                    0, 0, 0)  # fmt: skip
        strides = (q.stride(), k.stride(), v.stride(), out.stride(), _NO_LSE_STRIDES if lse is None else lse.stride())
        sizes = (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim_qk, head_dim_v, -1, -1)
    else:
        cu_q, cu_k, used_k, max_q, max_k = varlen
        total_q, heads_q, head_dim_qk = q.shape
        pointers = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),  # type: ignore[union-attr]
                    cu_q.data_ptr(), cu_k.data_ptr(), 0 if used_k is None else used_k.data_ptr())  # fmt: skip
        strides = (_packed_strides(q), _packed_strides(k), _packed_strides(v), _packed_strides(out),
                   _packed_lse_strides(lse))  # type: ignore[arg-type]  # fmt: skip
        # total_q / total_k: the packed rows, the bounds the kernels clamp every offset to.
        total_k, heads_kv, _ = k.shape
        sizes = (cu_q.shape[0] - 1, heads_q, heads_kv, max_q, max_k, head_dim_qk, v.shape[2], total_q, total_k)
    return (pointers, strides, sizes, mask, scale, DTYPE_CODES[q.dtype], device, stream)


def new_workspace(nbytes: int, device: torch.device) -> Tensor:
    """A forward's workspace: the decode path's split partials, the sm90 forward's split tail (a
    module function so the GPU tests can poison it)."""
    return torch.empty(nbytes, dtype=torch.uint8, device=device)


def _decode_item(
    spec: tuple[Any, ...], mask: MaskSpec, kv_cache: bool, num_splits: int, device: torch.device,
    block_table: Tensor | None = None, page_size: int = 0, num_pages: int = 0, seqused_k_add: int = 0,
    features: int = 0,
) -> tuple[tuple[Any, ...], Tensor | None] | None:
    """The decode item of a spec (module.cpp's fwd_spec, 9th item) and the split workspace behind
    its pointers (decode_layout: one allocation from the caching allocator), or None when no
    decode kernel serves the call (the plan's reasons then say why). The caller holds the returned
    tensor until the launch is queued (stream-ordered reuse after that is safe, and graph-safe);
    dropped before, the memory is free while the kernel writes it (compute-sanitizer memcheck with
    the caching allocator off caught exactly that)."""
    layout = _DECODE.get((spec[6], spec[5], spec[2], mask, kv_cache, num_splits) + ((features,) if features else ()))
    if layout is None:
        layout = decode_layout(spec[6], spec[5], spec[2], mask, kv_cache, num_splits, features)
    if isinstance(layout, str):
        if kv_cache:
            raise ValueError(f"flashsdpa.attention_with_kvcache: no decode kernel serves this call: {layout}")
        return None
    splits, o_bytes, lse_bytes, lse_offset, nbytes = layout
    o_ptr = lse_ptr = 0
    workspace = None
    if nbytes:
        workspace = new_workspace(nbytes, device)
        o_ptr = workspace.data_ptr()
        lse_ptr = o_ptr + lse_offset
    table = 0 if block_table is None else block_table.data_ptr()
    table_stride = 0 if block_table is None else block_table.stride(0)
    return (splits, o_ptr, lse_ptr, o_bytes, lse_bytes, table, table_stride, page_size, num_pages, seqused_k_add), workspace


def launch_fwd(
    q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor | None, scale: float, mask: MaskSpec,
    varlen: Varlen | None = None, num_splits: int = 0, mods: Mods | None = None,
    dropout: tuple[float, int, int, int, int, int] | None = None,
) -> None:
    """Forward: writes ``out`` and ``lse``. Dense: (B, H, S, D) views, ``lse`` (B, Hq, Sq) or None
    (inference: its allocation is a tenth of a small call's host time). Varlen: packed (total, H,
    D) rows, ``lse`` (H, total_q), cu_seqlens int32 (B + 1). Dense calls with at most
    ``DECODE_MAX_SEQLEN_Q`` query rows take the decode kernel (split-KV, GQA-packed) where the
    capability table has one; ``num_splits`` (0: heuristic) is its split count. ``mods``: the
    score modifiers (softcap, ALiBi, sinks, the bias), in the spec only when given; a decode-sized
    call with the bias alone takes the decode kernel where the table's decode path lists it
    (capabilities.cpp's decode_features). ``dropout``: module.cpp's spec.dropout (dropout.py
    builds it); the forward kernel, never with ``mods``. Forward-kernel launches get the workspace
    _C.fwd_workspace_bytes asks for (cached per problem). Callers have checked the problem.
    """
    spec = _spec(q, k, v, out, lse, scale, mask, varlen)
    if dropout is not None:
        spec = (*spec, None, None, dropout)
    else:
        # mods: a masked decode-sized call takes the decode kernel where its plan (asked with the
        # call's feature bits: the table's decode_features) accepts them; any other, the forward.
        extra = () if mods is None else (_mods_item(mods),)
        if varlen is None and spec[2][3] <= DECODE_MAX_SEQLEN_Q:  # seqlen_q
            decode = _decode_item(spec, mask, False, num_splits, q.device, features=feature_bits(mods) if extra else 0)
            if decode is not None:
                item, workspace = decode
                _C.fwd((*spec, item, *extra))
                del workspace  # only now: the launch is queued
                return
        spec = (*spec, None, *extra) if extra else spec
    # The forward kernel's workspace (the sm90 family's dynamic-schedule counter or split tail),
    # asked once per problem (varlen: its packed totals left out of the key); held until queued.
    key = (spec[6], spec[5], spec[2] if varlen is None else spec[2][:7], mask, mods is None, dropout is None)
    nbytes = _FWD_WS.get(key)
    if nbytes is None:
        if len(_FWD_WS) >= _DECODE_CACHE_SIZE:
            _FWD_WS.clear()
        nbytes = _FWD_WS[key] = int(_C.fwd_workspace_bytes(spec))
    if not nbytes:
        _C.fwd(spec)
        return
    workspace = new_workspace(nbytes, q.device)
    _C.fwd(((*spec[0], workspace.data_ptr(), nbytes), *spec[1:]))
    del workspace


def launch_kvcache(
    q: Tensor, k_cache: Tensor, v_cache: Tensor, out: Tensor, lse: Tensor | None, scale: float, mask: MaskSpec,
    seqused_k: Tensor, block_table: Tensor | None, num_splits: int, seqused_k_add: int = 0,
) -> None:
    """The decode kernel against a KV cache: ``q``, ``out`` (B, Sq, H, D); a contiguous cache
    (B, S_cache, Hkv, D) or a paged one (num_pages, page_size, Hkv, D) with ``block_table``
    (B, max_pages) int32; sequence b attends to its first ``seqused_k[b] + seqused_k_add`` keys
    (int32, device: the cache_seqlens before this call's append, and the rows it appended);
    ``lse`` (B, Hq, Sq) float32 or None. No host sync: lengths stay on the device."""
    batch, seqlen_q, heads_q, head_dim_qk = q.shape
    heads_kv, head_dim_v = v_cache.shape[2], v_cache.shape[3]
    capacity = k_cache.shape[1] if block_table is None else block_table.shape[1] * k_cache.shape[1]
    qs, ks, vs, os = q.stride(), k_cache.stride(), v_cache.stride(), out.stride()
    device = q.get_device()
    spec = (
        (q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr(), 0 if lse is None else lse.data_ptr(),
         0, 0, seqused_k.data_ptr()),
        ((qs[0], qs[2], qs[1]), (ks[0], ks[2], ks[1]), (vs[0], vs[2], vs[1]), (os[0], os[2], os[1]),
         _NO_LSE_STRIDES if lse is None else lse.stride()),
        (batch, heads_q, heads_kv, seqlen_q, capacity, head_dim_qk, head_dim_v, -1, -1),
        mask, scale, DTYPE_CODES[q.dtype], device, _current_stream(device),
    )  # fmt: skip
    page_size = 0 if block_table is None else k_cache.shape[1]
    num_pages = 0 if block_table is None else k_cache.shape[0]  # the kernel clamps block-table entries to it
    decode = _decode_item(spec, mask, True, num_splits, q.device, block_table, page_size, num_pages, seqused_k_add)
    item, workspace = decode  # type: ignore[misc]  # kv_cache: raises rather than returning None
    _C.fwd((*spec, item))
    del workspace  # only now: the launch is queued


def _workspace(nbytes: int, like: Tensor) -> Tensor:
    """A backward workspace buffer from the caching allocator (stream-ordered, CUDA-graph friendly).
    Two allocations (dq_accum, delta), as PyTorch's flash backward makes: see api.cpp's
    workspace_layout for the 1 MiB one buffer cost. The kernels zero what they need, so no fill
    launch; blocks are 512-byte aligned, more than the 256 _C asks for."""
    return torch.empty(nbytes, dtype=torch.uint8, device=like.device)


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
    mask: MaskSpec,
    varlen: Varlen | None = None,
    mods: Mods | None = None,
    mod_grads: tuple[Tensor | None, ...] | None = None,
    dropout: tuple[float, int, int, int, int, int] | None = None,
) -> None:
    """Backward: writes ``dq``, ``dk``, ``dv`` (dense views or packed rows, as in launch_fwd); with
    ``mods``, adds into ``mod_grads`` = (d_alibi_slopes, d_sinks): zeroed float32 tensors of the
    slopes' and the sinks' shapes, or None where not wanted. ``dropout``: spec.dropout with the
    forward's rng state (dropout.from_rng_state); never with ``mods``.

    One _C call: the workspace is sized here from the head-dim bucket the capability table picks
    for the problem (cached per problem), rows x heads x bucket float32 for dq_accum and rows x heads
    float32 for delta, rows = seqlen_q per batch or total_q (api.cpp's workspace_layout). A family
    that declines the call itself (TMA alignment) leaves it to one whose bucket is no larger, so the
    size holds."""
    spec = _spec(q, k, v, out, lse, scale, mask, varlen)
    sizes = spec[2]
    # Deterministic when the user asked and a family of ours can (else the caller has already
    # raised, or warned under warn_only, as PyTorch does for an op without a deterministic kernel).
    bits = feature_bits(mods) | (FEATURE_BITS["dropout"] if dropout is not None else 0)
    problem = (spec[6], spec[5], sizes[5], sizes[6], masks.kind(mask), varlen is not None)
    asked = torch.are_deterministic_algorithms_enabled()
    verdict = select(*problem, BACKWARD_DETERMINISTIC, bits) if asked else (None,)
    deterministic = verdict[0] is not None
    bucket = (verdict if deterministic else select(*problem, 1, bits))[1]
    rows = sizes[1] * (sizes[7] if varlen is not None else sizes[0] * sizes[3])
    # delta's floats, then with the modifiers' gradients two more per row (params.h's row_pdp and
    # row_pdist), then (dense) one int32 per (batch, head, 64-row query block): the dQ semaphores
    # of the deterministic mode (api.cpp's workspace_layout).
    d_slopes, d_sinks = mod_grads[:2] if mods is not None and mod_grads is not None else (None, None)
    row_floats = 1 if d_slopes is None and d_sinks is None else 3
    semaphores = 0 if varlen is not None else sizes[0] * sizes[1] * ((sizes[3] + 63) // 64) * 4
    delta_bytes = row_floats * rows * 4 + semaphores
    dq_accum, delta = _workspace(rows * bucket * 4, q), _workspace(delta_bytes, q)
    if varlen is None:
        grad_strides = (dout.stride(), dq.stride(), dk.stride(), dv.stride())
    else:
        grad_strides = (_packed_strides(dout), _packed_strides(dq), _packed_strides(dk), _packed_strides(dv))
    grads: tuple[Any, ...] = (
        (dout.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), dq_accum.data_ptr(), delta.data_ptr()),
        grad_strides,
        (rows * bucket * 4, delta_bytes),
        deterministic,
    )  # fmt: skip
    if dropout is not None:
        _C.bwd((*spec, None, None, dropout), grads)
        return
    if mods is None:
        _C.bwd(spec, grads)
        return
    # d_bias (optional third): dense (B, Hq, Sq, Sk) contiguous in the query's dtype, zeroed.
    extra = mod_grads[2:] if mod_grads is not None else ()
    ptrs = tuple(0 if t is None else t.data_ptr() for t in (d_slopes, d_sinks, *extra))
    _C.bwd((*spec, None, _mods_item(mods)), (*grads, ptrs))

