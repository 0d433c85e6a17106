# test_generation.py: greedy generation of the Llama-style test decoder inside flashsdpa.enable()
# (issue 11's HF generation test). Random weights, no download (Hugging Face's Llama where
# transformers imports, else the plain-torch decoder of bench/llama.py, the same computation).
#
# The bf16 model generates 32 tokens after a 64-token prompt inside enable() (prefill on our
# forward, every new token on the decode path). The same token sequence is then replayed,
# teacher-forced (a near-tie cannot make the sequences diverge), through PyTorch's own kernels in
# bf16 and through a float32 copy of the model: at every step our logits must be within the usual
# rule of the float32 ones (at most 2x the error of PyTorch's bf16 kernels, + 1e-5).
from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

import flashsdpa
from flashsdpa.bench import llama
from helpers import gpu_skip_reason, skip_unless_compiled

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"
SHAPE = llama.DecoderShape(hidden=512, layers=2, heads=8, kv_heads=2, intermediate=1376, vocab=1024)
PROMPT, NEW_TOKENS = 64, 32


def _last_logits(decoder: llama.Decoder, ids: Tensor, cache: Any) -> tuple[Tensor, Any]:
    """Logits of the last position for ``ids`` appended to ``cache`` (None: a new sequence)."""
    model = decoder.model
    if isinstance(decoder, llama.HFDecoder):
        out = model(input_ids=ids, past_key_values=cache, use_cache=True)
        return out.logits[:, -1].float(), out.past_key_values
    if cache is None:
        cache = [[] for _ in range(SHAPE.layers)]
    return model(ids, cache, last_only=True)[:, -1].float(), cache


def _run(decoder: llama.Decoder, prompt: Tensor, forced: Tensor | None) -> tuple[Tensor, list[Tensor]]:
    """Greedy tokens (or, with ``forced``, those tokens fed back) and the logits of every step."""
    tokens, logits = [], []
    with torch.no_grad():
        step_logits, cache = _last_logits(decoder, prompt, None)
        for i in range(NEW_TOKENS):
            logits.append(step_logits)
            token = step_logits.argmax(-1, keepdim=True) if forced is None else forced[:, i : i + 1]
            tokens.append(token)
            if i + 1 < NEW_TOKENS:
                step_logits, cache = _last_logits(decoder, token, cache)
    return torch.cat(tokens, 1), logits


def test_generation_inside_enable_matches_the_rule_at_every_step() -> None:
    skip_unless_compiled(torch.bfloat16, SHAPE.head_dim)
    torch.manual_seed(0)
    ours_model = llama.build(SHAPE, torch.bfloat16, DEVICE)
    impl = "hf" if isinstance(ours_model, llama.HFDecoder) else "torch"
    reference = llama.build(SHAPE, torch.float32, DEVICE, impl=impl)
    reference.model.load_state_dict({k: v.float() for k, v in ours_model.model.state_dict().items()})
    prompt = torch.randint(0, SHAPE.vocab, (1, PROMPT), device=DEVICE)

    flashsdpa.reset_stats()
    with flashsdpa.enable():
        tokens, ours = _run(ours_model, prompt, None)
    served = sum(c["served"] for c in flashsdpa.stats()["ops"].values())
    assert served >= SHAPE.layers * NEW_TOKENS, f"our kernels served {served} calls: {flashsdpa.stats()['ops']}"

    _, pytorch = _run(ours_model, prompt, tokens)  # PyTorch's own kernels, bf16, teacher-forced
    _, exact = _run(reference, prompt, tokens)  # float32
    for step, (o, p, e) in enumerate(zip(ours, pytorch, exact)):
        err, pt_err = (o - e).abs().max().item(), (p - e).abs().max().item()
        assert err <= 2 * pt_err + 1e-5, f"step {step}: max|ours - fp32| {err:.3e} > 2 x PyTorch's {pt_err:.3e} + 1e-5"
