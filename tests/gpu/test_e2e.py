# test_e2e.py: whole models trained for a few steps inside flashsdpa.enable(), eager and compiled:
# an nn.TransformerEncoderLayer, an nn.MultiheadAttention and a small decoder-only transformer
# (causal, GQA). Their losses and first-step gradients must match the same model trained in
# float32 as closely as the same bf16 model on PyTorch's own kernels does, flashsdpa.stats() must
# show our kernels served forward and backward, and a profiler trace must show their kernels.
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import flashsdpa
from helpers import fresh_compile, gpu_skip_reason, skip_unless_compiled

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"
STEPS = 4
DIM = 256


class DecoderBlock(nn.Module):
    """Pre-norm block: causal grouped-query self-attention through SDPA, then an MLP."""

    def __init__(self, dim: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: Tensor) -> Tensor:
        b, s, _ = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k, v = (t.transpose(1, 2) for t in self.kv(h).view(b, s, 2, self.kv_heads, self.head_dim).unbind(2))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
        return x + self.mlp(self.norm2(x))


class TinyDecoder(nn.Module):
    def __init__(self, vocab: int = 512, dim: int = DIM, heads: int = 8, kv_heads: int = 2, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(DecoderBlock(dim, heads, kv_heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


class AttentionRegressor(nn.Module):
    """nn.MultiheadAttention (need_weights=False, so SDPA) and a linear read-out."""

    def __init__(self, dim: int = DIM, heads: int = 2) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, dropout=0.0, batch_first=True)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.attn(x, x, x, need_weights=False)[0])


@dataclass(frozen=True)
class Case:
    """A model, its batch and its loss; head_dim is what reaches SDPA."""

    make: Callable[[], nn.Module]
    batch: Callable[[torch.Generator], tuple[Tensor, Tensor]]
    loss: Callable[[Tensor, Tensor], Tensor]
    head_dim: int


def _regression_batch(gen: torch.Generator) -> tuple[Tensor, Tensor]:
    return (
        torch.randn(4, 256, DIM, generator=gen, device=DEVICE),
        torch.randn(4, 256, DIM, generator=gen, device=DEVICE),
    )


def _token_batch(gen: torch.Generator) -> tuple[Tensor, Tensor]:
    tokens = torch.randint(0, 512, (4, 257), generator=gen, device=DEVICE)
    return tokens[:, :-1], tokens[:, 1:]


def _lm_loss(logits: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


CASES: dict[str, Case] = {
    "encoder_layer": Case(
        lambda: nn.TransformerEncoderLayer(DIM, 4, 512, dropout=0.0, batch_first=True),  # head dim 64
        _regression_batch,
        lambda y, t: F.mse_loss(y.float(), t),
        64,
    ),
    "multihead_attention": Case(AttentionRegressor, _regression_batch, lambda y, t: F.mse_loss(y.float(), t), 128),
    "decoder": Case(TinyDecoder, _token_batch, _lm_loss, 32),
}


@dataclass
class Run:
    losses: list[float]
    grads: list[Tensor]  # after the first step, in parameter order
    kernels: set[str]  # CUDA kernel names of the last step (profiled)


def _kernel_names(prof: torch.profiler.profile) -> set[str]:
    """Names of the GPU kernels in a trace (not the CPU-side op events, which would also say
    "flashsdpa" for our Python ops without proving that our kernels ran)."""
    cuda = torch.autograd.DeviceType.CUDA
    return {e.name for e in prof.events() if e.device_type == cuda}


def train(name: str, *, bf16: bool, compiled: bool) -> Run:
    """STEPS steps of AdamW from the same initial weights on the same batch; the last step profiled."""
    case = CASES[name]
    torch.manual_seed(0)  # the same initial weights in every run
    model = case.make().to(DEVICE)
    forward = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inputs, targets = case.batch(torch.Generator(device=DEVICE).manual_seed(1))
    losses: list[float] = []
    grads: list[Tensor] = []
    kernels: set[str] = set()
    for step in range(STEPS):
        profiling = step == STEPS - 1
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        prof = torch.profiler.profile(activities=activities) if profiling else None
        if prof is not None:
            prof.__enter__()
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=bf16):
            loss = case.loss(forward(inputs), targets)
        loss.backward()
        torch.cuda.synchronize()
        if prof is not None:
            prof.__exit__(None, None, None)
            kernels = _kernel_names(prof)
        losses.append(loss.item())
        if step == 0:
            grads = [p.grad.detach().clone() for p in model.parameters()]
        opt.step()
        opt.zero_grad(set_to_none=True)
    return Run(losses, grads, kernels)


@functools.cache
def baselines(name: str) -> tuple[Run, Run]:
    """The float32 run (the reference) and the bf16 run on PyTorch's own kernels (the yardstick),
    eager, computed once per model."""
    return train(name, bf16=False, compiled=False), train(name, bf16=True, compiled=False)


def _grad_error(run: Run, ref: Run) -> float:
    return math.sqrt(sum(float((g.double() - r.double()).pow(2).sum()) for g, r in zip(run.grads, ref.grads)))


def _served() -> tuple[int, int]:
    ops = flashsdpa.stats()["ops"]
    bwd = sum(c["served"] for op, c in ops.items() if "backward" in op or "bwd" in op)
    return sum(c["served"] for c in ops.values()) - bwd, bwd


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", list(CASES))
def test_training_matches(name: str, compiled: bool) -> None:
    skip_unless_compiled(torch.bfloat16, CASES[name].head_dim)
    ref, pt = baselines(name)
    assert not any("flashsdpa" in k for k in pt.kernels), "the PyTorch baseline ran flashsdpa's kernels"

    fwd0, bwd0 = _served()
    with fresh_compile(), flashsdpa.enable():
        ours = train(name, bf16=True, compiled=compiled)
    fwd1, bwd1 = _served()
    assert fwd1 > fwd0 and bwd1 > bwd0, f"served forward {fwd1 - fwd0}, backward {bwd1 - bwd0}"
    assert any("flashsdpa" in k for k in ours.kernels), sorted(ours.kernels)

    assert all(math.isfinite(x) for x in ours.losses), ours.losses
    # The rule, for a whole model: bf16 with our attention may sit no further from float32 than
    # twice where bf16 with PyTorch's attention sits (the two share every other bf16 rounding).
    loss_err = max(abs(a - r) for a, r in zip(ours.losses, ref.losses))
    pt_loss_err = max(abs(a - r) for a, r in zip(pt.losses, ref.losses))
    assert loss_err <= 2 * pt_loss_err + 1e-5 * abs(ref.losses[0]), (ours.losses, pt.losses, ref.losses)
    grad_err, pt_grad_err = _grad_error(ours, ref), _grad_error(pt, ref)
    ref_norm = math.sqrt(sum(float(g.double().pow(2).sum()) for g in ref.grads))
    assert grad_err <= 2 * pt_grad_err + 1e-5 * ref_norm, (grad_err, pt_grad_err, ref_norm)
