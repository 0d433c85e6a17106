# reference.py: the blockwise FlashAttention algorithm (forward and backward) written in PyTorch.
#
# It serves the direct API on CPU and is the readable statement of what the CUDA kernels compute:
# the same tiling, the same online softmax, the same LSE convention, the same backward. It is slow
# (one Python loop iteration per tile) but exact in float32 and linear in memory: no tensor of
# Sq x Sk elements is ever allocated, only (query block) x (key block) tiles.
"""Blockwise FlashAttention in PyTorch: the reference the CUDA kernels are held to.

Layout is SDPA's: ``q (B, Hq, Sq, Dqk)``, ``k (B, Hkv, Sk, Dqk)``, ``v (B, Hkv, Sk, Dv)``,
``out (B, Hq, Sq, Dv)``, ``lse (B, Hq, Sq)``. Any strides are accepted; outputs are contiguous.

Forward, for each block of query rows (the kernel's thread block)::

    m = -inf, l = 0, acc = 0                          # running max, running sum, unnormalised output
    for each block of keys the rows can see:
        s   = (scale * q_blk) @ k_blk^T               # float32 tile, Bm x Bn
        s   = -inf where masked (causal)               # only on blocks that straddle the diagonal
        m'  = max(m, rowmax(s))
        p   = exp(s - m'),  alpha = exp(m - m')        # alpha rescales what was accumulated so far
        l   = alpha * l + rowsum(p)
        acc = alpha * acc + p @ v_blk
        m   = m'
    out = acc / l,   lse = m + log(l)                  # natural log, float32

Backward (FlashAttention-2's): nothing of the forward is kept but ``out`` and ``lse``::

    delta = rowsum(dout * out)                         # preprocess, float32 (rowsum(p * dp)
                                                       # itself when Sk <= 16: _exact_delta)
    for each block of keys (outer loop, one dK/dV accumulator in registers in the kernel):
        for each block of queries that can see it:
            p  = exp(s - lse)                          # s recomputed exactly as in the forward
            dV += p^T @ dout_blk
            dp = dout_blk @ v_blk^T
            ds = p * (dp - delta)                      # softmax backward, using rowsum(p * dp) = delta
            dK += ds^T @ (scale * q_blk)
            dQ += ds @ k_blk                           # float32 accumulator, scaled once at the end
    dQ *= scale

GQA: query head ``h`` reads key/value head ``h // (Hq // Hkv)``. The ``G = Hq // Hkv`` query heads
that share a key/value head are packed into the row dimension of one tile ("pack GQA"), so K and V
are never expanded: a (G * Bm) x Bn score tile is multiplied by the shared Bn x D key tile, and the
sums over the group in dK and dV fall out of the matmuls.

Masks (``causal_mode``): 0 none; 1 top-left, key ``j`` visible to query ``i`` iff ``j <= i``
(SDPA's ``is_causal``); 2 bottom-right, iff ``j <= i + Sk - Sq`` (``causal_lower_right``, the
KV-cache alignment). Or ``mask=(window_left, window_right, align)`` (flashsdpa.masks, params.h's
MaskSpec): ``diag(i) - left <= j <= diag(i) + right`` with ``diag(i) = i`` (align 0) or
``i + Sk - Sq`` (align 1), -1 unbounded. Key blocks no row of a query block sees are skipped,
blocks every row sees whole run without a mask, and only the others are masked, as in the kernels.

Rows that see no key at all (bottom-right with Sq > Sk, a window, or Sk = 0) give ``out = 0`` and
``lse = +inf``, and their gradients are 0; nothing is ever NaN. This is the convention of the
FlashAttention-2 kernel that PyTorch's CUDA flash backend runs: its epilogue writes ``+inf`` when
the row sum is 0. ``+inf`` is the one value that makes the backward's recomputation ``exp(s - lse)``
give exactly 0 for every key of such a row with no special case, so a forward from one
implementation and a backward from another (ours and PyTorch's flash ops, mixed through SDPA)
agree. ``-inf`` would turn that into ``exp(+inf)``, and a finite value such as 0 (what PyTorch's
CPU flash kernel stores) would make the recomputed probabilities nonzero. PyTorch's math backend
returns no LSE; its ``_safe_softmax`` also gives output 0 and zero gradients for such rows.

Training features (``features=``, a :class:`flashsdpa.reference_features.Features`): attention
masks, logit softcapping, ALiBi, attention sinks and dropout with an explicit keep-mask enter the
same loops through its hooks: ``scores`` turns each recomputed ``q k^T`` tile into the scores (before
the window's -inf), ``dropped`` applies the keep-mask to ``p`` for ``p @ v`` (and to ``dp``),
``fold_sinks`` adds each row's sink to the running max and sum once the keys are done, and
``score_grads`` collects the mask's and slopes' gradients from ``ds``. Without it nothing changes.

Precision: computation is in float32 (float64 when any input is float64); ``out`` and the gradients
are rounded to the input dtypes once, at the end; ``lse`` is always float32 (the format of
PyTorch's flash ops), which bounds float64 gradients to about 1e-7 relative accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from flashsdpa.masks import BOTTOM_RIGHT, BY_CAUSAL_MODE, MaskSpec
from flashsdpa.reference_features import Features

__all__ = ["CAUSAL_BOTTOM_RIGHT", "CAUSAL_NONE", "CAUSAL_TOP_LEFT", "attention_backward", "attention_forward"]

CAUSAL_NONE = 0
CAUSAL_TOP_LEFT = 1
CAUSAL_BOTTOM_RIGHT = 2


def varlen_sequences(cu_q: Tensor, cu_k: Tensor) -> list[tuple[int, slice, slice]]:
    """(batch index, query rows, key rows) of every packed sequence that has queries (a sequence
    without queries has nothing to compute; its keys' gradients stay 0)."""
    starts_q, starts_k = cu_q.tolist(), cu_k.tolist()
    return [
        (b, slice(starts_q[b], starts_q[b + 1]), slice(starts_k[b], starts_k[b + 1]))
        for b in range(len(starts_q) - 1)
        if starts_q[b + 1] > starts_q[b]
    ]


def as_batch(t: Tensor) -> Tensor:
    """(S, H, D) rows of one packed sequence as a (1, H, S, D) batch of one."""
    return t.transpose(0, 1).unsqueeze(0)


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, causal_mode: int, mask: MaskSpec | None, block_size: int) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"expected 4-D (B, H, S, D) tensors, got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ValueError(f"batch sizes differ: q {q.shape[0]}, k {k.shape[0]}, v {v.shape[0]}")
    if k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} differ in heads or sequence length")
    if q.shape[3] != k.shape[3]:
        raise ValueError(f"q head dim {q.shape[3]} differs from k head dim {k.shape[3]}")
    heads_q, heads_kv = q.shape[1], k.shape[1]
    if (heads_kv == 0 and heads_q != 0) or (heads_kv != 0 and heads_q % heads_kv != 0):
        raise ValueError(f"query heads ({heads_q}) must be a multiple of key/value heads ({heads_kv})")
    if causal_mode not in (CAUSAL_NONE, CAUSAL_TOP_LEFT, CAUSAL_BOTTOM_RIGHT):
        raise ValueError(f"causal_mode must be 0 (none), 1 (top-left) or 2 (bottom-right), got {causal_mode}")
    if mask is not None and (
        causal_mode != CAUSAL_NONE or len(mask) != 3 or min(mask[:2]) < -1 or mask[2] not in (0, 1)
    ):
        raise ValueError(f"mask={mask}: needs (left >= -1, right >= -1, align 0 or 1), and causal_mode 0")
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")
    floating = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype not in floating:
            raise TypeError(f"{name} has dtype {t.dtype}; expected one of {floating}")


def _compute_dtype(*tensors: Tensor) -> torch.dtype:
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


@dataclass(frozen=True)
class _Window:
    """Which keys each query row sees, for one (Sq, Sk) problem (mask.cuh's BlockMask in Python)."""

    seqlen_q: int
    seqlen_k: int
    diag: int  # key column of row 0's diagonal
    left: int  # -1 = unbounded
    right: int

    @staticmethod
    def of(causal_mode: int, mask: MaskSpec | None, seqlen_q: int, seqlen_k: int) -> _Window:
        left, right, align = BY_CAUSAL_MODE[causal_mode] if mask is None else mask
        return _Window(seqlen_q, seqlen_k, seqlen_k - seqlen_q if align == BOTTOM_RIGHT else 0, left, right)

    def col_begin(self, row: int) -> int:
        return 0 if self.left < 0 else max(0, row + self.diag - self.left)

    def col_end(self, row: int) -> int:
        return self.seqlen_k if self.right < 0 else max(0, min(self.seqlen_k, row + self.diag + self.right + 1))

    def row_begin(self, col: int) -> int:
        """The first row that sees column ``col`` or a later one."""
        return 0 if self.right < 0 else max(0, min(self.seqlen_q, col - self.diag - self.right))

    def row_end(self, col: int) -> int:
        """One past the last row that sees column ``col`` or an earlier one."""
        return self.seqlen_q if self.left < 0 else max(0, min(self.seqlen_q, col - self.diag + self.left + 1))

    def mask_tile(self, s: Tensor, groups: int, m0: int, m1: int, n0: int, n1: int) -> None:
        """Set the invisible scores of a packed (.., groups * (m1 - m0), n1 - n0) tile to -inf, in
        place. Tiles every row sees whole are left alone."""
        if self.col_end(m0) >= n1 and self.col_begin(m1 - 1) <= n0:
            return
        rows = torch.arange(m0, m1, device=s.device)[:, None] + self.diag
        cols = torch.arange(n0, n1, device=s.device)[None, :]
        hidden = torch.zeros(m1 - m0, n1 - n0, dtype=torch.bool, device=s.device)
        if self.left >= 0:
            hidden |= cols < rows - self.left
        if self.right >= 0:
            hidden |= cols > rows + self.right
        s.view(*s.shape[:-2], groups, m1 - m0, n1 - n0).masked_fill_(hidden, float("-inf"))


def _pack(t: Tensor, groups: int, m0: int, m1: int, dtype: torch.dtype) -> Tensor:
    """Rows [m0, m1) of the ``groups`` query heads sharing each key/value head, as one tile.

    (B, Hq, S, ...) -> (B, Hkv, groups * (m1 - m0), ...): a copy of one block, never of the whole
    tensor. It may alias ``t`` (when no copy is needed), so callers must not write into it.
    """
    blk = t.unflatten(1, (-1, groups))[:, :, :, m0:m1]
    return blk.reshape(*blk.shape[:2], groups * (m1 - m0), *blk.shape[4:]).to(dtype)


def _unpack(t: Tensor, groups: int) -> Tensor:
    """Inverse of ``_pack`` for a view: (B, Hkv, groups * Bm, ...) -> (B, Hkv, groups, Bm, ...)."""
    return t.unflatten(2, (groups, -1))


@torch.no_grad()
def attention_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scale: float,
    causal_mode: int = CAUSAL_NONE,
    mask: MaskSpec | None = None,
    block_size: int = 128,
    features: Features | None = None,
) -> tuple[Tensor, Tensor]:
    """Attention forward, blockwise. Returns ``out`` (dtype of q, (B, Hq, Sq, Dv)) and ``lse``
    (float32, (B, Hq, Sq), natural log; +inf for rows that see no key)."""
    _check_inputs(q, k, v, causal_mode, mask, block_size)
    batch, heads_q, seqlen_q, _ = q.shape
    heads_kv, seqlen_k, head_dim_v = k.shape[1], k.shape[2], v.shape[3]
    acc_dtype = _compute_dtype(q, k, v)

    out = torch.empty(batch, heads_q, seqlen_q, head_dim_v, dtype=q.dtype, device=q.device)
    lse = torch.empty(batch, heads_q, seqlen_q, dtype=torch.float32, device=q.device)
    if lse.numel() == 0:
        return out, lse
    groups = heads_q // heads_kv
    window = _Window.of(causal_mode, mask, seqlen_q, seqlen_k)
    out_groups = out.unflatten(1, (heads_kv, groups))
    lse_groups = lse.unflatten(1, (heads_kv, groups))

    for m0 in range(0, seqlen_q, block_size):
        m1 = min(m0 + block_size, seqlen_q)
        # Folding the scale into q once per block (the kernel folds it into exp2's argument) keeps
        # the score tile a plain matmul; the backward recomputes s the same way, so p matches.
        q_blk = _pack(q, groups, m0, m1, acc_dtype) * scale
        rows = q_blk.shape[:-1]
        row_max = torch.full(rows, float("-inf"), dtype=acc_dtype, device=q.device)
        row_sum = torch.zeros(rows, dtype=acc_dtype, device=q.device)
        acc = torch.zeros(*rows, head_dim_v, dtype=acc_dtype, device=q.device)

        # Key blocks stay aligned to multiples of block_size (as the backward's are), from the one
        # holding the first row's first key to the one holding the last row's last key.
        first = window.col_begin(m0) // block_size * block_size
        for n0 in range(first, window.col_end(m1 - 1), block_size):
            n1 = min(n0 + block_size, seqlen_k)
            k_blk = k[:, :, n0:n1].to(acc_dtype)
            v_blk = v[:, :, n0:n1].to(acc_dtype)
            s = q_blk @ k_blk.transpose(-1, -2)
            if features is not None:
                s = features.scores(s, (groups, m0, m1, n0, n1))[0]
            window.mask_tile(s, groups, m0, m1, n0, n1)

            new_max = torch.maximum(row_max, s.amax(dim=-1))
            # A row with every key so far masked has max -inf; subtracting 0 instead keeps
            # exp(-inf - (-inf)) = NaN out: its p and alpha come out as exp(-inf) = 0.
            safe_max = torch.where(new_max == float("-inf"), 0.0, new_max)
            p = torch.exp(s - safe_max.unsqueeze(-1))
            alpha = torch.exp(row_max - safe_max)
            row_sum.mul_(alpha).add_(p.sum(dim=-1))
            if features is not None:
                p = features.dropped(p, (groups, m0, m1, n0, n1))
            acc.mul_(alpha.unsqueeze(-1)).add_(p @ v_blk)
            row_max = new_max

        seen = row_sum > 0
        if features is not None:
            row_max, row_sum, acc = features.fold_sinks(row_max, row_sum, acc, groups)
        acc.div_(torch.where(seen, row_sum, 1.0).unsqueeze(-1))
        blk_lse = torch.where(seen, row_max + torch.log(row_sum), float("inf"))
        out_groups[:, :, :, m0:m1] = _unpack(acc, groups).to(out.dtype)
        lse_groups[:, :, :, m0:m1] = _unpack(blk_lse, groups).to(torch.float32)
    return out, lse


# cuda/common/bwd_prepost.cuh's kExactDeltaMaxKeys: up to this many keys the backward's delta is
# sum_j P_ij dP_ij from the scores, not rowsum(dO * O) from the output rounded to its dtype (with
# two keys dP_j - delta is a small difference of large terms, and the rounded O moved dK past the
# accuracy rule in 18-32% of bf16 draws; docs/kernel_notes_bwd_sm90.md, session 52).
EXACT_DELTA_MAX_KEYS = 16


def _exact_delta(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, scale: float, window: _Window, dtype: torch.dtype
) -> Tensor:
    """delta = sum_j w_j dP_j / sum_j w_j, w_j = exp(s_j - max_j s_j) over the row's visible keys:
    the softmax's own normalisation, as the kernel's preprocess computes it (one visible key gives
    dP_j exactly; a row that sees no key 0). The whole (Sq, Sk) score matrix: Sk is at most 16."""
    groups = q.shape[1] // k.shape[1]
    seqlen_q, seqlen_k = q.shape[2], k.shape[2]
    s = (_pack(q, groups, 0, seqlen_q, dtype) * scale) @ k.to(dtype).transpose(-1, -2)
    window.mask_tile(s, groups, 0, seqlen_q, 0, seqlen_k)
    dp = _pack(dout, groups, 0, seqlen_q, dtype) @ v.to(dtype).transpose(-1, -2)
    row_max = s.amax(dim=-1, keepdim=True)
    # The maximum weighs exactly 1 (also +inf), a hidden key 0 (exp's NaN from inf - inf unused).
    w = torch.where(s == row_max, 1.0, torch.exp(s - row_max))
    w = torch.where(s == float("-inf"), 0.0, w)
    num = torch.where(w > 0, w * dp, 0.0).sum(dim=-1)
    den = w.sum(dim=-1)
    delta = torch.where(den > 0, num / torch.where(den > 0, den, 1.0), 0.0)
    return _unpack(delta, groups).flatten(1, 2)


@torch.no_grad()
def attention_backward(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    *,
    scale: float,
    causal_mode: int = CAUSAL_NONE,
    mask: MaskSpec | None = None,
    block_size: int = 128,
    features: Features | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Attention backward from the forward's ``out`` and ``lse``. Returns ``(dq, dk, dv)`` in the
    dtypes and shapes of q, k, v (contiguous); ``features`` (the forward's) then holds the extra
    gradients (``d_mask``, ``d_sinks``, ``d_alibi``)."""
    _check_inputs(q, k, v, causal_mode, mask, block_size)
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    expected_out = (batch, heads_q, seqlen_q, v.shape[3])
    if tuple(dout.shape) != expected_out or tuple(out.shape) != expected_out:
        raise ValueError(f"dout {tuple(dout.shape)} and out {tuple(out.shape)} must both be {expected_out}")
    if tuple(lse.shape) != expected_out[:3]:
        raise ValueError(f"lse has shape {tuple(lse.shape)}, expected {expected_out[:3]}")
    acc_dtype = _compute_dtype(q, k, v)
    window = _Window.of(causal_mode, mask, seqlen_q, seqlen_k)
    # Preprocess: delta_i = sum_j dO_ij O_ij = sum_j P_ij dP_ij, the softmax backward's row term;
    # with every key in one small block, from P and dP themselves (_exact_delta).
    plain = features is None or features.plain
    if 0 < seqlen_k <= EXACT_DELTA_MAX_KEYS and plain and batch * heads_q * seqlen_q > 0:
        delta = _exact_delta(dout, q, k, v, scale, window, acc_dtype)
    else:
        delta = (dout.to(acc_dtype) * out.to(acc_dtype)).sum(dim=-1)
    lse = lse.to(acc_dtype)
    if features is not None:
        features.start_backward(lse, delta, acc_dtype)

    dk = torch.zeros(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.zeros(v.shape, dtype=v.dtype, device=v.device)
    if batch * heads_q * seqlen_q == 0 or seqlen_k == 0:
        if features is not None:
            features.finish_backward()
        return torch.zeros(q.shape, dtype=q.dtype, device=q.device), dk, dv
    groups = heads_q // heads_kv
    # dQ gathers contributions from every key block: a float32 accumulator (the kernel's dq_accum).
    dq_acc = torch.zeros(batch, heads_kv, groups, seqlen_q, head_dim, dtype=acc_dtype, device=q.device)

    for n0 in range(0, seqlen_k, block_size):
        n1 = min(n0 + block_size, seqlen_k)
        k_blk = k[:, :, n0:n1].to(acc_dtype)
        v_blk = v[:, :, n0:n1].to(acc_dtype)
        dk_acc = torch.zeros_like(k_blk)
        dv_acc = torch.zeros_like(v_blk)
        # Query blocks stay aligned to multiples of block_size, as in the forward, so that the
        # recomputed score tiles are the forward's tiles.
        first = window.row_begin(n0) // block_size * block_size
        for m0 in range(first, window.row_end(n1 - 1), block_size):
            m1 = min(m0 + block_size, seqlen_q)
            q_blk = _pack(q, groups, m0, m1, acc_dtype) * scale
            do_blk = _pack(dout, groups, m0, m1, acc_dtype)
            lse_blk = _pack(lse, groups, m0, m1, acc_dtype)
            delta_blk = _pack(delta, groups, m0, m1, acc_dtype)

            s = q_blk @ k_blk.transpose(-1, -2)
            tile, deriv = (groups, m0, m1, n0, n1), None
            if features is not None:
                s, deriv = features.scores(s, tile)
            window.mask_tile(s, groups, m0, m1, n0, n1)
            # lse = +inf on rows that saw no key, so their p is exp(-inf) = 0 and they contribute nothing.
            p = torch.exp(s - lse_blk.unsqueeze(-1))
            dp = do_blk @ v_blk.transpose(-1, -2)
            if features is not None:  # dropout: out = (p * keep / (1 - dropout_p)) @ v
                dv_acc += features.dropped(p, tile).transpose(-1, -2) @ do_blk
                dp = features.dropped(dp, tile)
            else:
                dv_acc += p.transpose(-1, -2) @ do_blk
            ds = p.mul_(dp.sub_(delta_blk.unsqueeze(-1)))  # p is dead after this; reuse its storage
            if features is not None:
                ds = features.score_grads(ds, deriv, tile)
            dk_acc += ds.transpose(-1, -2) @ q_blk
            dq_acc[:, :, :, m0:m1] += _unpack(ds @ k_blk, groups)
        dk[:, :, n0:n1] = dk_acc.to(dk.dtype)
        dv[:, :, n0:n1] = dv_acc.to(dv.dtype)

    dq = dq_acc.mul_(scale).flatten(1, 2).to(q.dtype)
    if features is not None:
        features.finish_backward()
    return dq.contiguous(), dk, dv
