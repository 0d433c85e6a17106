# test_windows.py (GPU): sliding windows on flashsdpa's CUDA kernels, forward (out, LSE) and
# backward (dq, dk, dv), dense and varlen, top-left and bottom-right, against the float64 textbook
# with the project's rule (helpers.check_attention), outputs NaN-poisoned before a second run; and
# aten::_flash_attention_forward / _backward's window arguments against PyTorch's own flash kernel.
from __future__ import annotations

import math
import zlib

import pytest
import torch

import flashsdpa
from flashsdpa import _backend, masks
from helpers import Shape, check_attention, default_scale, gpu_skip_reason, make_qkv, skip_unless_compiled

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"
BF16, F16 = torch.bfloat16, torch.float16
# Left windows around the 64 / 128-key tiles (0, 1, 127, 128, 129) and one >= Sk; right sides:
# causal (0), a bound other than 0, unbounded.
LEFTS = (0, 1, 127, 128, 129, 4096)
RIGHTS = (0, 37, -1)
# (Sq, Sk): equal, more keys, more queries (bottom-right then leaves rows without keys).
LENGTHS = ((384, 384), (300, 517), (517, 300))


def _generator(request: pytest.FixtureRequest) -> torch.Generator:
    return torch.Generator(device=DEVICE).manual_seed(zlib.crc32(request.node.nodeid.encode()))


def _run(request: pytest.FixtureRequest, shape: Shape, dtype: torch.dtype, mask: masks.MaskSpec) -> None:
    skip_unless_compiled(dtype, shape.head_dim, shape.dv)
    gen = _generator(request)
    q, k, v = make_qkv(shape, dtype, DEVICE, generator=gen, requires_grad=True)
    dout = torch.randn(shape.batch, shape.heads_q, shape.seqlen_q, shape.dv, generator=gen, device=DEVICE).to(dtype)
    scale = default_scale(shape.head_dim)
    left, right, align = mask
    alignment = "bottom_right" if align == masks.BOTTOM_RIGHT else "top_left"
    kwargs = dict(causal=right == 0, causal_alignment=alignment, window=(left, right), scale=scale, return_lse=True)
    out, lse = flashsdpa.attention(q, k, v, **kwargs)  # type: ignore[arg-type]
    grads = torch.autograd.grad(out, (q, k, v), dout)
    torch.cuda.synchronize()
    check_attention(q, k, v, dout, out, grads, lse, scale=scale, causal_mode=mask)
    # Unwritten elements: the forward again into NaN-filled outputs must be bitwise the same.
    qd, kd, vd = q.detach(), k.detach(), v.detach()
    out_p, lse_p = torch.full_like(out, math.nan), torch.full_like(lse, math.nan)
    _backend.launch_fwd(qd, kd, vd, out_p, lse_p, scale, mask)
    torch.cuda.synchronize()
    assert torch.equal(out_p, out.detach()) and torch.equal(lse_p, lse)


@pytest.mark.parametrize("right", RIGHTS, ids=lambda r: f"right{r}")
@pytest.mark.parametrize("left", LEFTS, ids=lambda w: f"left{w}")
@pytest.mark.parametrize("lengths", LENGTHS, ids=lambda s: f"q{s[0]}k{s[1]}")
@pytest.mark.parametrize("align", [masks.TOP_LEFT, masks.BOTTOM_RIGHT], ids=["top_left", "bottom_right"])
def test_window_dense(request: pytest.FixtureRequest, align: int, lengths: tuple[int, int], left: int, right: int) -> None:
    shape = Shape("window", 2, 4, 2, *lengths, 128)
    _run(request, shape, BF16, (left, right, align))


@pytest.mark.parametrize("head_dim", [64, 256])
@pytest.mark.parametrize("dtype", [F16, BF16], ids=["fp16", "bf16"])
def test_window_head_dims(request: pytest.FixtureRequest, dtype: torch.dtype, head_dim: int) -> None:
    # The other tile shapes (128 x 128 at d <= 64, 8 warps at d = 256) and fp16.
    _run(request, Shape("window", 1, 2, 2, 333, 1000, head_dim), dtype, (200, 0, masks.BOTTOM_RIGHT))


@pytest.mark.parametrize("left, right", [(0, 0), (129, 0), (64, 64), (4096, 0)], ids=str)
def test_window_varlen(request: pytest.FixtureRequest, left: int, right: int) -> None:
    skip_unless_compiled(BF16, 128)
    gen = _generator(request)
    lengths_q, lengths_k = (1, 200, 517, 64), (300, 1, 517, 700)
    cu_q = torch.tensor([0, *torch.tensor(lengths_q).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    cu_k = torch.tensor([0, *torch.tensor(lengths_k).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    q = torch.randn(sum(lengths_q), 4, 128, generator=gen, device=DEVICE).to(BF16).requires_grad_()
    k, v = (torch.randn(sum(lengths_k), 2, 128, generator=gen, device=DEVICE).to(BF16).requires_grad_() for _ in "kv")
    dout = torch.randn_like(q)
    mask = (left, right, masks.BOTTOM_RIGHT)
    out, lse = flashsdpa.attention_varlen(
        q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), causal=right == 0, causal_alignment="bottom_right",
        window=(left, right), return_lse=True,
    )  # fmt: skip
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    scale = default_scale(128)
    for b in range(len(lengths_q)):
        rq = slice(int(cu_q[b]), int(cu_q[b + 1]))
        rk = slice(int(cu_k[b]), int(cu_k[b + 1]))
        one = [t.detach()[r].transpose(0, 1).unsqueeze(0) for t, r in ((q, rq), (k, rk), (v, rk))]
        grads = [g[r].transpose(0, 1).unsqueeze(0) for g, r in ((dq, rq), (dk, rk), (dv, rk))]
        check_attention(
            *one, dout[rq].transpose(0, 1).unsqueeze(0), out[rq].transpose(0, 1).unsqueeze(0), grads,
            lse[:, rq].unsqueeze(0), scale=scale, causal_mode=mask,
        )  # fmt: skip


@pytest.mark.parametrize(
    "is_causal, left, right", [(True, 128, None), (False, 64, 64), (False, 100, -1), (True, -1, -1)], ids=str
)
@pytest.mark.parametrize("lengths", [(512, 512), (700, 300)], ids=str)
def test_flash_op_windows_match_pytorch(
    request: pytest.FixtureRequest, lengths: tuple[int, int], is_causal: bool, left: int, right: int | None
) -> None:
    # aten::_flash_attention_forward / _backward with window sizes: ours inside enable(), PyTorch's
    # kernel outside; both against the reference of masks.torch_flash's reading of the arguments.
    skip_unless_compiled(BF16, 128)
    gen = _generator(request)
    seqlen_q, seqlen_k = lengths
    q = torch.randn(2, seqlen_q, 4, 128, generator=gen, device=DEVICE).to(BF16)
    k, v = (torch.randn(2, seqlen_k, 4, 128, generator=gen, device=DEVICE).to(BF16) for _ in "kv")
    dout = torch.randn_like(q)
    kwargs = {"window_size_left": left, "window_size_right": right, "scale": default_scale(128)}
    op, bwd = torch.ops.aten._flash_attention_forward.default, torch.ops.aten._flash_attention_backward.default

    def run() -> tuple[torch.Tensor, ...]:
        out, lse, rng, unused, _ = op(q, k, v, None, None, seqlen_q, seqlen_k, 0.0, is_causal, False, **kwargs)
        grads = bwd(dout, q, k, v, out, lse, None, None, seqlen_q, seqlen_k, 0.0, is_causal, rng, unused, **kwargs)
        return (out, lse, *grads)

    theirs = run()
    flashsdpa.reset_stats()
    with flashsdpa.enable():
        ours = run()
    served = flashsdpa.stats()["ops"]
    assert served["aten::_flash_attention_forward"]["served"] == 1
    assert served["aten::_flash_attention_backward"]["served"] == 1
    mask = masks.torch_flash(is_causal, left, right, seqlen_q, seqlen_k)
    bhsd = [t.transpose(1, 2) for t in (q, k, v, dout)]
    for result in (ours, theirs):
        out, lse, dq, dk, dv = result
        grads = [g.transpose(1, 2) for g in (dq, dk, dv)]
        check_attention(*bhsd[:3], bhsd[3], out.transpose(1, 2), grads, lse, scale=kwargs["scale"], causal_mode=mask)


def test_explain_window_served_on_cuda() -> None:
    # The portable family serves windows forward and backward on every GPU it runs on: explain()
    # has nothing to say about a window there, and names the families where it would.
    skip_unless_compiled(torch.bfloat16, 128)
    q = torch.randn(1, 2, 300, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    assert flashsdpa.explain(q, q, q, window=(128, 0)) == []
    assert any(f.startswith("sm80") for f in flashsdpa.selection.window_families())
