# test_varlen_clamp.py: bad varlen metadata never touches memory outside the tensors (issue 10,
# item 2, the kernels' half). CUDA metadata's values are not checked on the host unless asked
# (reading them synchronises: python/flashsdpa/validation.py), so the kernels clamp every offset
# (cuda/common/seqlen.cuh). Each case launches the forward and the backward with metadata the host
# checks would refuse, on tensors that are views into larger buffers:
#   - the guard rows around every input hold NaN: a read outside the tensor poisons the result;
#   - the guard rows around every output hold a sentinel: a write outside the tensor changes it;
#   - rows a sequence owns must equal attention over the clamped sequence (seqlen.cuh's rule,
#     restated in Python below), so the kernels agree with each other on what the sequence is.
# Accesses beyond the guards are for compute-sanitizer memcheck: scripts/dev/reliab_gpu.sh runs
# this file under it with PyTorch's caching allocator off (PYTORCH_NO_CUDA_MEMORY_CACHING=1, or
# an access inside one of the allocator's segments would look legal to the tool).
from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from torch import Tensor

import flashsdpa
from flashsdpa import _backend, masks, validation
from helpers import gpu_skip_reason, skip_unless_compiled

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

BF16 = torch.bfloat16
HEADS_Q, HEADS_KV, D = 4, 2, 128
TOTAL_Q, TOTAL_K = 40, 48
GUARD = 160  # rows each side: more than a tile (128) past either end
SENTINEL = 7.0
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Case:
    cu_q: tuple[int, ...]
    cu_k: tuple[int, ...]
    max_q: int
    max_k: int
    used_k: tuple[int, ...] | None = None


CASES = {
    "good (control)": Case((0, 9, 25, 40), (0, 16, 30, 48), 16, 18),
    "offsets past the end": Case((0, 9, 100, 5000), (0, 16, 300, 70000), 64, 64),
    "decreasing offsets": Case((0, 30, 5, 40), (0, 40, 2, 48), 40, 48),
    "negative and non-zero start": Case((-1000, 7, 30, 40), (-5, 10, 20, 48), 64, 64),
    "int32 extremes": Case((INT32_MAX, -(2**31), 0, INT32_MAX), (0, INT32_MAX, -(2**31), 3), 64, 64),
    "max_seqlen below the longest": Case((0, 9, 25, 40), (0, 16, 30, 48), 5, 7),
    "seqused_k negative and past the sequence": Case((0, 9, 25, 40), (0, 16, 30, 48), 16, 18, (-4, 1000, 3)),
}


def clamped(case: Case) -> list[tuple[int, int, int, int]]:
    """(q start, q end, k start, k end) per sequence: cuda/common/seqlen.cuh's SeqlenInfo in Python."""
    spans = []
    for b in range(len(case.cu_q) - 1):
        q0 = min(max(case.cu_q[b], 0), TOTAL_Q)
        q1 = min(max(case.cu_q[b + 1], q0), TOTAL_Q)
        k0 = min(max(case.cu_k[b], 0), TOTAL_K)
        k1 = min(max(case.cu_k[b + 1], k0), TOTAL_K)
        len_q, len_k = min(q1 - q0, case.max_q), min(k1 - k0, case.max_k)
        if case.used_k is not None:
            len_k = min(len_k, max(case.used_k[b], 0))
        spans.append((q0, q0 + len_q, k0, k0 + len_k))
    return spans


def _guarded(rows: int, heads: int, fill: float, dtype: torch.dtype = BF16) -> tuple[Tensor, Tensor]:
    """(buffer, view): ``rows`` packed (rows, heads, D) rows in the middle of a buffer whose
    GUARD rows on each side hold ``fill``."""
    buffer = torch.full((GUARD + rows + GUARD, heads, D), fill, device="cuda", dtype=dtype)
    return buffer, buffer[GUARD : GUARD + rows]


def _guarded_lse(fill: float) -> tuple[Tensor, Tensor]:
    """(buffer, view) of the varlen LSE (Hq, total_q): guard columns on each side of every head."""
    buffer = torch.full((HEADS_Q, GUARD + TOTAL_Q + GUARD), fill, device="cuda", dtype=torch.float32)
    return buffer, buffer[:, GUARD : GUARD + TOTAL_Q]


def _random_inside(view: Tensor) -> None:
    view.copy_(torch.randn(view.shape, device="cuda", dtype=view.dtype))


def _guards_unchanged(name: str, buffer: Tensor, fill: float, row_dim: int = 0) -> None:
    rows = buffer.shape[row_dim]
    for part in (buffer.narrow(row_dim, 0, GUARD), buffer.narrow(row_dim, rows - GUARD, GUARD)):
        if math.isnan(fill):
            changed = int((~torch.isnan(part)).sum())
        else:
            changed = int((part != fill).sum())
        assert changed == 0, f"{name}: {changed} guard elements written (an access outside the tensor)"


def _reference(
    q: Tensor, k: Tensor, v: Tensor, dout: Tensor, causal: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """out, lse, dq, dk, dv of one packed sequence (S, H, D), float32; no key: 0 out, +inf LSE."""
    sq, sk = q.shape[0], k.shape[0]
    if sk == 0:
        zeros = torch.zeros_like
        return (zeros(q).float(), torch.full((HEADS_Q, sq), math.inf, device="cuda"), zeros(q).float(),
                zeros(k).float(), zeros(v).float())  # fmt: skip
    qf, kf, vf = (t.float().transpose(0, 1).requires_grad_() for t in (q, k, v))
    group = HEADS_Q // HEADS_KV
    kx, vx = kf.repeat_interleave(group, 0), vf.repeat_interleave(group, 0)
    scores = qf @ kx.transpose(1, 2) / math.sqrt(D)
    if causal:  # top-left: row i sees keys 0..i, so every row sees key 0
        scores = scores.masked_fill(torch.ones(sq, sk, dtype=torch.bool, device="cuda").triu(1), -math.inf)
    lse = scores.logsumexp(-1)
    out = torch.softmax(scores, -1) @ vx
    dq, dk, dv = torch.autograd.grad(out, (qf, kf, vf), dout.float().transpose(0, 1))
    return (out.detach().transpose(0, 1), lse.detach(), dq.transpose(0, 1), dk.transpose(0, 1),
            dv.transpose(0, 1))  # fmt: skip


def _owned_once(spans: list[tuple[int, int]], total: int) -> list[tuple[int, int, int]]:
    """(sequence, start, end) of each span, trimmed to the rows no other sequence claims: clamped
    bad metadata can make sequences overlap, and there two CTAs write the same rows."""
    count = [0] * total
    for start, end in spans:
        for r in range(start, end):
            count[r] += 1
    return [(b, start, end) for b, (start, end) in enumerate(spans) if end > start and max(count[start:end]) == 1]


@pytest.mark.parametrize("causal", [False, True], ids=["no mask", "causal"])
@pytest.mark.parametrize("name", list(CASES))
def test_bad_metadata_stays_inside_the_tensors(name: str, causal: bool) -> None:
    skip_unless_compiled(BF16, D)
    case = CASES[name]
    mask = masks.CAUSAL_TOP_LEFT if causal else masks.NO_MASK
    nan = float("nan")
    (qb, q), (kb, k), (vb, v), (dob, dout) = (
        _guarded(TOTAL_Q, HEADS_Q, nan), _guarded(TOTAL_K, HEADS_KV, nan), _guarded(TOTAL_K, HEADS_KV, nan),
        _guarded(TOTAL_Q, HEADS_Q, nan),
    )  # fmt: skip
    for view in (q, k, v, dout):
        _random_inside(view)
    (ob, out), (lb, lse) = _guarded(TOTAL_Q, HEADS_Q, SENTINEL), _guarded_lse(-SENTINEL)
    grads = [_guarded(rows, heads, SENTINEL) for rows, heads in ((TOTAL_Q, HEADS_Q), (TOTAL_K, HEADS_KV), (TOTAL_K, HEADS_KV))]
    (dqb, dq), (dkb, dk), (dvb, dv) = grads

    def i32(values: tuple[int, ...]) -> Tensor:
        return torch.tensor(values, dtype=torch.int32, device="cuda")

    used = None if case.used_k is None else i32(case.used_k)
    varlen = (i32(case.cu_q), i32(case.cu_k), used, case.max_q, case.max_k)
    scale = 1 / math.sqrt(D)
    # _backend's launches: every host check is behind us (what validate=False leaves to the kernels).
    _backend.launch_fwd(q, k, v, out, lse, scale, mask, varlen)
    _backend.launch_bwd(dout, q, k, v, out, lse, dq, dk, dv, scale, mask, varlen)
    torch.cuda.synchronize()  # a launch or memory error surfaces here

    for label, buffer, fill in (("q", qb, nan), ("k", kb, nan), ("v", vb, nan), ("dout", dob, nan),
                                ("out", ob, SENTINEL), ("dq", dqb, SENTINEL), ("dk", dkb, SENTINEL),
                                ("dv", dvb, SENTINEL)):  # fmt: skip
        _guards_unchanged(label, buffer, fill)
    _guards_unchanged("lse", lb, -SENTINEL, row_dim=1)

    spans = clamped(case)
    refs = [_reference(q[q0:q1], k[k0:k1], v[k0:k1], dout[q0:q1], causal) for q0, q1, k0, k1 in spans]
    tol = {"atol": 2e-2, "rtol": 2e-2}
    for b, q0, q1 in _owned_once([(s[0], s[1]) for s in spans], TOTAL_Q):
        ref_out, ref_lse, ref_dq, _, _ = refs[b]
        torch.testing.assert_close(out[q0:q1].float(), ref_out, **tol, msg=lambda m: f"sequence {b} out: {m}")
        torch.testing.assert_close(lse[:, q0:q1], ref_lse, atol=1e-3, rtol=1e-3, msg=lambda m: f"sequence {b} lse: {m}")
        # dq is accumulated per query row from every key block of its own sequence only.
        torch.testing.assert_close(dq[q0:q1].float(), ref_dq, **tol, msg=lambda m: f"sequence {b} dq: {m}")
    q_owned = {b for b, _, _ in _owned_once([(s[0], s[1]) for s in spans], TOTAL_Q)}
    for b, k0, k1 in _owned_once([(s[2], s[3]) for s in spans], TOTAL_K):
        if b not in q_owned and spans[b][1] > spans[b][0]:
            continue  # its queries overlap another sequence's: dO and O there are not this sequence's alone
        _, _, _, ref_dk, ref_dv = refs[b]
        torch.testing.assert_close(dk[k0:k1].float(), ref_dk, **tol, msg=lambda m: f"sequence {b} dk: {m}")
        torch.testing.assert_close(dv[k0:k1].float(), ref_dv, **tol, msg=lambda m: f"sequence {b} dv: {m}")


def test_public_api_without_value_checks() -> None:
    """attention_varlen with CUDA metadata and validate=False (the default): the offsets go to the
    kernels unread; bad ones give wrong rows, never a fault, and the CUDA context stays healthy."""
    skip_unless_compiled(BF16, D)
    assert not validation.is_enabled(), "run without FLASHSDPA_VALIDATE: this test is about the unchecked path"
    q = torch.randn(TOTAL_Q, HEADS_Q, D, device="cuda", dtype=BF16, requires_grad=True)
    k, v = (torch.randn(TOTAL_K, HEADS_KV, D, device="cuda", dtype=BF16, requires_grad=True) for _ in range(2))
    cu_q = torch.tensor([0, 9, 5000, -3], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 70000, 2, 48], dtype=torch.int32, device="cuda")
    out = flashsdpa.attention_varlen(q, k, v, cu_q, cu_k, 4, 9, causal=True)
    out.float().sum().backward()
    torch.cuda.synchronize()
    # Sequence 0 is rows 0..9 of q (truncated to max_seqlen_q = 4) against keys 0..9 of k.
    ref = _reference(q[:4].detach(), k[:9].detach(), v[:9].detach(), torch.ones(4, HEADS_Q, D, device="cuda"), True)
    torch.testing.assert_close(out[:4].detach().float(), ref[0], atol=2e-2, rtol=2e-2)
    # A fresh, valid call still works (no sticky error in the context).
    good = flashsdpa.attention_varlen(
        q.detach(), k.detach(), v.detach(), torch.tensor([0, 40], dtype=torch.int32, device="cuda"),
        torch.tensor([0, 48], dtype=torch.int32, device="cuda"), 40, 48,
    )  # fmt: skip
    torch.cuda.synchronize()
    assert bool(torch.isfinite(good).all())
