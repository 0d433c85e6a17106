# reference_features.py: the training features of issue 14 as they enter reference.py's blockwise
# loops: attention masks (boolean and additive, with the additive mask's gradient), logit
# softcapping, ALiBi, attention sinks and dropout with an explicit keep-mask. reference.py calls
# the hooks of one Features object per call on each score tile; this module owns what they do,
# tile by tile, so that the loops (the statement of the kernels' algorithm) stay one.
"""Per-tile hooks of the reference for masks, softcap, ALiBi, sinks and dropout.

With ``t = scale * q @ k^T`` for query row ``i`` of head ``h`` and key ``j`` (one (B, H, Sq, Sk)
problem; varlen runs it per sequence), the score and the softmax are::

    s   = softcap * tanh(t / softcap)           (softcap > 0; else s = t)
        - slope[b, h] * |i + Sk - Sq - j|       (ALiBi, FlashAttention's convention)
        + attn_mask[b, h, i, j]                 (additive; a boolean mask sets -inf where False)
        = -inf outside the causal mask / window
    P   = exp(s - lse),  lse = log(sum_j exp(s_ij) + exp(sink[h]))    (the sink has no value row)
    out = sum_j P_ij * keep[b, h, i, j] / (1 - dropout_p) * v_j

Rows with no visible key give ``out = 0``, ``lse = +inf`` (the sink alone does not make a row
visible), zero gradients and no contribution to ``d_sinks``. The backward gives, besides dq, dk,
dv: the additive mask's gradient ``dS`` summed over the mask's broadcast dimensions (the shape of
the mask, as PyTorch's efficient kernel returns it), ``d_sinks[h] = -sum_{b,i} exp(sink[h] - lse)
* delta`` and ``d_alibi[b, h] = -sum_{i,j} dS * |i + Sk - Sq - j|`` (reduced to the slopes' shape).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["Features", "Tile"]

Tile = tuple[int, int, int, int, int]  # (groups, m0, m1, n0, n1) of reference.py's packed tiles


def _as4d(t: Tensor) -> Tensor:
    return t.reshape((1,) * (4 - t.dim()) + tuple(t.shape))


class Features:
    """The extra inputs of one attention call (one (B, Hq, Sq, Sk) problem), checked and laid out
    for the tile hooks; after a backward, ``d_mask``, ``d_sinks`` and ``d_alibi`` hold the extra
    gradients (None where the input is absent or, for a boolean mask, not differentiable)."""

    def __init__(
        self,
        shape: tuple[int, int, int, int],
        *,
        attn_mask: Tensor | None = None,
        softcap: float = 0.0,
        alibi_slopes: Tensor | None = None,
        sinks: Tensor | None = None,
        dropout_p: float = 0.0,
        dropout_keep: Tensor | None = None,
    ) -> None:
        batch, heads, seqlen_q, seqlen_k = shape
        self.shape = shape
        self.mask4: Tensor | None = None
        self.mask_shape: tuple[int, ...] = ()
        self.mask: Tensor | None = None  # expanded to (B, H, Sq, Sk): a view, never a copy
        if attn_mask is not None:
            if attn_mask.dim() > 4 or not attn_mask.is_floating_point() and attn_mask.dtype != torch.bool:
                raise ValueError(f"attn_mask {tuple(attn_mask.shape)} {attn_mask.dtype}: needs <= 4 dims, bool or float")
            self.mask_shape = tuple(attn_mask.shape)
            self.mask4 = _as4d(attn_mask)
            try:
                self.mask = self.mask4.expand(shape)
            except RuntimeError:
                raise ValueError(f"attn_mask {self.mask_shape}: does not broadcast to (B, H, Sq, Sk) = {shape}") from None
        if softcap < 0 or not math.isfinite(softcap):
            raise ValueError(f"softcap={softcap}: needs a finite value >= 0 (0 = off)")
        self.softcap = float(softcap)
        self.slopes_shape: tuple[int, ...] = ()
        self.slopes: Tensor | None = None  # (B, H)
        if alibi_slopes is not None:
            if tuple(alibi_slopes.shape) not in ((heads,), (batch, heads)):
                raise ValueError(f"alibi_slopes {tuple(alibi_slopes.shape)}: needs ({heads},) or ({batch}, {heads})")
            self.slopes_shape = tuple(alibi_slopes.shape)
            self.slopes = alibi_slopes.expand(batch, heads)
        if sinks is not None and tuple(sinks.shape) != (heads,):
            raise ValueError(f"sinks {tuple(sinks.shape)}: needs ({heads},), one logit per query head")
        self.sinks = sinks
        if not 0.0 <= dropout_p < 1.0:
            raise ValueError(f"dropout_p={dropout_p}: needs 0 <= dropout_p < 1")
        if (dropout_keep is None) != (dropout_p == 0.0):
            raise ValueError("dropout_keep: needs a boolean keep-mask exactly when dropout_p > 0")
        self.dropout_p = float(dropout_p)
        self.keep: Tensor | None = None
        if dropout_keep is not None:
            if dropout_keep.dtype != torch.bool or dropout_keep.dim() > 4:
                raise ValueError(f"dropout_keep {dropout_keep.dtype}: needs a bool tensor of <= 4 dims")
            self.keep = _as4d(dropout_keep).expand(shape)
        self.d_mask: Tensor | None = None
        self.d_sinks: Tensor | None = None
        self.d_alibi: Tensor | None = None

    @property
    def plain(self) -> bool:
        """No feature changes P: the kernels' params have no score modifier and no dropout (the
        backward's exact delta of a few keys then applies, reference.py's _exact_delta)."""
        no_mods = self.mask is None and self.softcap == 0.0 and self.slopes is None and self.sinks is None
        return no_mods and self.keep is None

    # ---- helpers ----------------------------------------------------------------------------------

    def _tile(self, t: Tensor, tile: Tile) -> Tensor:
        """(B, Hq, Sq, Sk) view -> the tile's (B, Hkv, groups, Bm, Bn) view."""
        groups, m0, m1, n0, n1 = tile
        return t[:, :, m0:m1, n0:n1].unflatten(1, (-1, groups))

    def _distance(self, tile: Tile, device: torch.device, dtype: torch.dtype) -> Tensor:
        _, m0, m1, n0, n1 = tile
        _, _, seqlen_q, seqlen_k = self.shape
        rows = torch.arange(m0, m1, device=device, dtype=dtype)[:, None] + (seqlen_k - seqlen_q)
        return (rows - torch.arange(n0, n1, device=device, dtype=dtype)[None, :]).abs()

    def _slopes5(self, groups: int, dtype: torch.dtype) -> Tensor:
        assert self.slopes is not None
        return self.slopes.to(dtype).unflatten(1, (-1, groups))[..., None, None]

    def _packed_sinks(self, groups: int, rows: int, dtype: torch.dtype) -> Tensor:
        """The sinks in a packed tile's row layout: (Hkv, groups * rows)."""
        assert self.sinks is not None
        return self.sinks.to(dtype).view(-1, groups, 1).expand(-1, groups, rows).flatten(1)

    # ---- the hooks --------------------------------------------------------------------------------

    def scores(self, t: Tensor, tile: Tile) -> tuple[Tensor, Tensor | None]:
        """The scores of a packed (B, Hkv, groups * Bm, Bn) tile of ``t = scale * q k^T`` (before
        the window's -inf), and the softcap's derivative ds/dt (None without softcap)."""
        deriv = None
        if self.softcap > 0:
            th = torch.tanh(t / self.softcap)
            s = th * self.softcap
            deriv = 1 - th * th
        else:
            s = t.clone()
        groups, m0, m1, _, _ = tile
        s5 = s.view(*s.shape[:2], groups, m1 - m0, s.shape[-1])
        if self.slopes is not None:
            s5 -= self._slopes5(groups, s.dtype) * self._distance(tile, s.device, s.dtype)
        if self.mask is not None:
            m5 = self._tile(self.mask, tile)
            if m5.dtype == torch.bool:
                s5.masked_fill_(~m5, float("-inf"))
            else:
                s5 += m5.to(s.dtype)
        return s, deriv

    def dropped(self, x: Tensor, tile: Tile) -> Tensor:
        """``x * keep / (1 - dropout_p)`` on a packed tile (x itself without dropout)."""
        if self.keep is None:
            return x
        groups, m0, m1, _, _ = tile
        keep5 = self._tile(self.keep, tile)
        out = x.view(*x.shape[:2], groups, m1 - m0, x.shape[-1]) * keep5 / (1.0 - self.dropout_p)
        return out.view(x.shape)

    def fold_sinks(
        self, row_max: Tensor, row_sum: Tensor, acc: Tensor, groups: int
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The forward's epilogue: each row's sink joins the running max and sum (no value row)."""
        if self.sinks is None:
            return row_max, row_sum, acc
        sink = self._packed_sinks(groups, row_max.shape[-1] // groups, row_max.dtype)
        new_max = torch.maximum(row_max, sink)
        alpha = torch.exp(row_max - new_max)  # row_max = -inf (no key yet) gives 0
        return new_max, row_sum * alpha + torch.exp(sink - new_max), acc * alpha.unsqueeze(-1)

    def start_backward(self, lse: Tensor, delta: Tensor, dtype: torch.dtype) -> None:
        """Zero the extra gradients' accumulators; ``d_sinks`` needs only the rows' LSE and delta
        (full (B, Hq, Sq) tensors): ``dS_sink = P_sink * (0 - delta)``."""
        batch, heads, _, _ = self.shape
        device = lse.device
        self.d_mask = None
        if self.mask4 is not None and self.mask4.is_floating_point():
            self.d_mask = torch.zeros(self.mask4.shape, dtype=dtype, device=device)
        # The slopes' gradient sums dS * distance over whole rows and columns: summed in float64
        # (B x H numbers), so that its rounding stays that of the entries, not of a long sum.
        self.d_alibi = None if self.slopes is None else torch.zeros(batch, heads, dtype=torch.float64, device=device)
        self.d_sinks = None
        if self.sinks is not None:
            p_sink = torch.exp(self.sinks.to(dtype)[:, None] - lse.to(dtype))  # lse = +inf gives 0
            self.d_sinks = -(p_sink * delta.to(dtype)).double().sum(dim=(0, 2))

    def score_grads(self, ds: Tensor, deriv: Tensor | None, tile: Tile) -> Tensor:
        """Record the mask's and the slopes' gradients from ``dS`` of a packed tile; returns the
        gradient with respect to ``t`` (through the softcap)."""
        groups, m0, m1, n0, n1 = tile
        ds4 = ds.view(*ds.shape[:2], groups, m1 - m0, ds.shape[-1]).flatten(1, 2)  # (B, Hq, Bm, Bn)
        if self.d_mask is not None:
            dims = [d for d in range(4) if self.d_mask.shape[d] == 1 and ds4.shape[d] != 1]
            part = ds4.sum(dim=dims, keepdim=True) if dims else ds4
            rows = slice(m0, m1) if self.d_mask.shape[2] != 1 else slice(None)
            cols = slice(n0, n1) if self.d_mask.shape[3] != 1 else slice(None)
            self.d_mask[:, :, rows, cols] += part
        if self.d_alibi is not None:
            self.d_alibi -= (ds4.double() * self._distance(tile, ds.device, torch.float64)).sum(dim=(-1, -2))
        return ds if deriv is None else ds * deriv

    def finish_backward(self) -> None:
        """Give the extra gradients the shapes (and dtypes) of their inputs."""
        if self.d_mask is not None:
            assert self.mask4 is not None
            self.d_mask = self.d_mask.reshape(self.mask_shape).to(self.mask4.dtype)
        if self.d_alibi is not None and self.slopes is not None:
            d = self.d_alibi if len(self.slopes_shape) == 2 else self.d_alibi.sum(dim=0)
            self.d_alibi = d.to(self.slopes.dtype)
        if self.d_sinks is not None and self.sinks is not None:
            self.d_sinks = self.d_sinks.to(self.sinks.dtype)
