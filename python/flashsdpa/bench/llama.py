# bench/llama.py: the Llama-style decoders the model rows time, with random weights.
#
# Users feel models, not kernels: the model rows run a Hugging Face `LlamaForCausalLM` built from a
# `LlamaConfig` (no download, attn_implementation="sdpa", so attention goes through
# F.scaled_dot_product_attention, which is where flashsdpa.enable() and sdpa_kernel act).
# transformers is imported lazily: it is on the GPU machine (5.x) but need not be anywhere else.
# Without it, a plain-torch decoder of the same shape (RMSNorm, rotary embeddings, GQA through
# SDPA's enable_gqa, SwiGLU MLP, untied head; the cache grown by concatenation as HF's
# DynamicCache does) keeps the rows measurable; each row says which one ran. Both sit behind one
# small interface (loss, prefill, step), so the timing code does not care which.
"""Llama-style decoders with random weights: Hugging Face's where installed, else plain torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class DecoderShape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int = 32000  # LlamaConfig's default

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


# hidden 2048, 8 layers, GQA 16/4, TinyLlama's MLP width: 491.8 M parameters, as the anchors'
# (shared/anchors/h200_hf_llama_train_step.json: params_M 491.81696).
LARGE = DecoderShape(hidden=2048, layers=8, heads=16, kv_heads=4, intermediate=5632)
# The shim-cost issue's small model: hidden 256, 4 layers (4 heads of 64, no GQA).
SMALL = DecoderShape(hidden=256, layers=4, heads=4, kv_heads=4, intermediate=688)


def transformers_missing() -> str | None:
    """None where transformers' Llama imports, else why not."""
    try:
        from transformers import LlamaConfig, LlamaForCausalLM  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means: use the fallback
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ''}"
    return None


class Decoder:
    """loss(ids) for a train step; prefill(ids) and step(token, cache) for greedy generation."""

    impl = ""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def loss(self, ids: Tensor) -> Tensor:
        raise NotImplementedError

    def prefill(self, ids: Tensor) -> tuple[Tensor, Any]:
        raise NotImplementedError

    def step(self, token: Tensor, cache: Any) -> tuple[Tensor, Any]:
        raise NotImplementedError


class HFDecoder(Decoder):
    impl = "hf-llama"

    def loss(self, ids: Tensor) -> Tensor:
        return self.model(input_ids=ids, labels=ids).loss

    def prefill(self, ids: Tensor) -> tuple[Tensor, Any]:
        # What generate() does with a prompt: a dynamic cache, logits of the last position only.
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1:].argmax(-1), out.past_key_values

    def step(self, token: Tensor, cache: Any) -> tuple[Tensor, Any]:
        out = self.model(input_ids=token, past_key_values=cache, use_cache=True)
        return out.logits[:, -1:].argmax(-1), out.past_key_values


def _rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    # As HF's LlamaRMSNorm: in float32, then back to the input dtype before the weight.
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rotate_half(x: Tensor) -> Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class _Layer(nn.Module):
    def __init__(self, s: DecoderShape) -> None:
        super().__init__()
        d = s.head_dim
        self.shape = s
        self.q = nn.Linear(s.hidden, s.heads * d, bias=False)
        self.k = nn.Linear(s.hidden, s.kv_heads * d, bias=False)
        self.v = nn.Linear(s.hidden, s.kv_heads * d, bias=False)
        self.o = nn.Linear(s.heads * d, s.hidden, bias=False)
        self.gate = nn.Linear(s.hidden, s.intermediate, bias=False)
        self.up = nn.Linear(s.hidden, s.intermediate, bias=False)
        self.down = nn.Linear(s.intermediate, s.hidden, bias=False)
        self.norm1 = nn.Parameter(torch.ones(s.hidden))
        self.norm2 = nn.Parameter(torch.ones(s.hidden))

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: list[Tensor] | None) -> Tensor:
        b, n, _ = x.shape
        s, d = self.shape, self.shape.head_dim
        h = _rms_norm(x, self.norm1)
        q = self.q(h).view(b, n, s.heads, d).transpose(1, 2)
        k = self.k(h).view(b, n, s.kv_heads, d).transpose(1, 2)
        v = self.v(h).view(b, n, s.kv_heads, d).transpose(1, 2)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        if cache is not None:
            if cache:  # grown by concatenation, as HF's DynamicCache
                k, v = torch.cat((cache[0], k), dim=2), torch.cat((cache[1], v), dim=2)
            cache[:] = [k, v]
        # A single new token sees the whole cache: no mask, as HF passes it.
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=n > 1, enable_gqa=s.kv_heads != s.heads)
        x = x + self.o(attn.transpose(1, 2).reshape(b, n, s.heads * d))
        h = _rms_norm(x, self.norm2)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class TorchLlama(nn.Module):
    """The plain-torch fallback: HF's Llama computation, without transformers."""

    def __init__(self, s: DecoderShape, theta: float = 10000.0) -> None:
        super().__init__()
        self.shape = s
        self.embed = nn.Embedding(s.vocab, s.hidden)
        self.layers = nn.ModuleList(_Layer(s) for _ in range(s.layers))
        self.norm = nn.Parameter(torch.ones(s.hidden))
        self.head = nn.Linear(s.hidden, s.vocab, bias=False)
        self.theta = theta
        for m in self.modules():  # HF's initializer_range
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, ids: Tensor, cache: list[list[Tensor]] | None = None, last_only: bool = False) -> Tensor:
        start = cache[0][0].shape[2] if cache and cache[0] else 0
        d = self.shape.head_dim
        pos = torch.arange(start, start + ids.shape[1], device=ids.device, dtype=torch.float32)
        inv = 1.0 / self.theta ** (torch.arange(0, d, 2, device=ids.device, dtype=torch.float32) / d)
        angles = torch.outer(pos, inv)
        angles = torch.cat((angles, angles), dim=-1)
        x = self.embed(ids)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, None if cache is None else cache[i])
        x = _rms_norm(x[:, -1:] if last_only else x, self.norm)
        return self.head(x)


class TorchDecoder(Decoder):
    impl = "torch-llama"

    def loss(self, ids: Tensor) -> Tensor:
        logits = self.model(ids)
        # HF's loss: logits upcast to float32, labels shifted by one.
        return F.cross_entropy(logits[:, :-1].float().flatten(0, 1), ids[:, 1:].flatten())

    def prefill(self, ids: Tensor) -> tuple[Tensor, Any]:
        # (self.model is a TorchLlama here: build() pairs them; nn.Module's attributes are untyped)
        layers: int = self.model.shape.layers  # type: ignore[union-attr,assignment]
        cache: list[list[Tensor]] = [[] for _ in range(layers)]
        logits = self.model(ids, cache, last_only=True)
        return logits.argmax(-1), cache

    def step(self, token: Tensor, cache: Any) -> tuple[Tensor, Any]:
        return self.model(token, cache, last_only=True).argmax(-1), cache


def build(shape: DecoderShape, dtype: torch.dtype, device: str, impl: str = "auto") -> Decoder:
    """A decoder of ``shape`` with random weights; impl "auto" (HF where it imports), "hf" or "torch"."""
    if impl == "hf" or (impl == "auto" and transformers_missing() is None):
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(
            hidden_size=shape.hidden,
            intermediate_size=shape.intermediate,
            num_hidden_layers=shape.layers,
            num_attention_heads=shape.heads,
            num_key_value_heads=shape.kv_heads,
            vocab_size=shape.vocab,
            max_position_embeddings=16384,
        )
        with torch.device(device):  # initialised where it runs: no 2 GB host-to-device copy
            model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa", dtype=dtype)
        return HFDecoder(model.to(device=device, dtype=dtype))
    with torch.device(device):
        model = TorchLlama(shape)
    return TorchDecoder(model.to(dtype=dtype))


def parameter_count(decoder: Decoder) -> int:
    return sum(p.numel() for p in decoder.model.parameters())
