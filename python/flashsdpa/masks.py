# masks.py: the Python mirror of params.h's MaskSpec, and the two ways a caller spells a mask:
# flashsdpa's own (causal flag, alignment, window) and PyTorch's flash ops' (is_causal,
# window_size_left / window_size_right, bottom-right). Everything else passes the tuple through.
"""Attention masks as ``(window_left, window_right, align)`` tuples, params.h's MaskSpec.

Key ``j`` is visible to query ``i`` iff ``j < Sk`` and ``diag(i) - left <= j <= diag(i) + right``,
where ``diag(i) = i`` (top-left, ``align = 0``) or ``i + Sk - Sq`` (bottom-right, ``align = 1``) and
a side of ``-1`` is unbounded. Causal is ``(-1, 0, align)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

MaskSpec = tuple[int, int, int]  # (window_left, window_right, align)

TOP_LEFT = 0
BOTTOM_RIGHT = 1
NO_MASK: MaskSpec = (-1, -1, TOP_LEFT)
CAUSAL_TOP_LEFT: MaskSpec = (-1, 0, TOP_LEFT)
CAUSAL_BOTTOM_RIGHT: MaskSpec = (-1, 0, BOTTOM_RIGHT)
# The causal_mode ints of flashsdpa's ops before windows: 0 none, 1 top-left, 2 bottom-right.
BY_CAUSAL_MODE: tuple[MaskSpec, ...] = (NO_MASK, CAUSAL_TOP_LEFT, CAUSAL_BOTTOM_RIGHT)
ALIGNMENTS = {"top_left": TOP_LEFT, "bottom_right": BOTTOM_RIGHT}
# Mask kinds in the capability table, by code (capabilities.h's MaskKind).
KIND_NAMES = ("none", "causal_top_left", "causal_bottom_right", "window")


def kind(mask: MaskSpec) -> int:
    """The mask kind's code: 0 none, 1 causal top-left, 2 causal bottom-right, 3 window."""
    left, right, align = mask
    if left < 0 and right < 0:
        return 0
    if left < 0 and right == 0:
        return 1 + align
    return 3


def make(causal: bool, alignment: str, window: tuple[int, int] | None) -> MaskSpec:
    """The direct API's mask: ``window=(left, right)`` (-1 = unbounded) measured from the diagonal of
    ``alignment``; ``causal`` additionally hides every key right of that diagonal."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal={causal!r}: needs a bool")
    if alignment not in ALIGNMENTS:
        raise ValueError(f"causal_alignment={alignment!r}: needs 'top_left' or 'bottom_right'")
    left, right = -1, -1
    if window is not None:
        if (
            not isinstance(window, (tuple, list))
            or len(window) != 2
            or not all(isinstance(w, int) and not isinstance(w, bool) and w >= -1 for w in window)
        ):
            raise ValueError(f"window={window!r}: needs (left, right), each an int >= 0 or -1 (unbounded)")
        left, right = window
    if causal:
        right = 0
    return (left, right, ALIGNMENTS[alignment])


def torch_flash(is_causal: bool, left: int | None, right: int | None, seqlen_q: int, seqlen_k: int) -> MaskSpec:
    """What PyTorch's flash kernel (FA2, flash_api.cpp) makes of ``_flash_attention_forward`` /
    ``_backward``'s arguments, always bottom-right aligned; ``seqlen_q`` / ``seqlen_k`` are the
    dense lengths or varlen's max_q / max_k. In its order: a side >= seqlen_k is unbounded; with
    one query row is_causal is dropped (every key is then at or left of the diagonal); is_causal
    sets the right side to 0; and with only the left side bounded the right one becomes seqlen_k
    (a real bound when Sq > 2 Sk + 1: the first rows then see nothing, as in PyTorch)."""
    left = -1 if left is None or left < 0 or left >= seqlen_k else left
    right = -1 if right is None or right < 0 or right >= seqlen_k else right
    if seqlen_q == 1:
        is_causal = False
    if is_causal:
        right = 0
    if left >= 0 and right < 0:
        right = seqlen_k
    return (left, right, BOTTOM_RIGHT)


def visible(mask: MaskSpec, seqlen_q: int, seqlen_k: int, device: torch.device | str = "cpu") -> Tensor | None:
    """The (Sq, Sk) boolean matrix of visible pairs, or None for no mask."""
    left, right, align = mask
    if left < 0 and right < 0:
        return None
    diag = seqlen_k - seqlen_q if align == BOTTOM_RIGHT else 0
    offset = torch.arange(seqlen_k, device=device)[None, :] - torch.arange(seqlen_q, device=device)[:, None] - diag
    ok = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if left >= 0:
        ok &= offset >= -left
    if right >= 0:
        ok &= offset <= right
    return ok


def visible_pairs(mask: MaskSpec, seqlen_q: int, seqlen_k: int) -> int:
    """How many (query, key) pairs attend: the work a kernel that skips hidden tiles does."""
    left, right, align = mask
    diag = seqlen_k - seqlen_q if align == BOTTOM_RIGHT else 0
    total = 0
    for i in range(seqlen_q):
        lo = 0 if left < 0 else max(0, i + diag - left)
        hi = seqlen_k if right < 0 else min(seqlen_k, i + diag + right + 1)
        total += max(0, hi - lo)
    return total
