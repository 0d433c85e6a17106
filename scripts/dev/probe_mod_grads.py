# probe_mod_grads.py: where the sinks' and ALiBi slopes' gradients lose accuracy. For the two
# failing rows of tests/gpu/test_features_gpu.py, compares ours and the bf16 yardstick with the
# float64 reference, and the reference formula evaluated with delta = rowsum(dO * O) from the
# bf16-rounded output (what a FlashAttention backward's preprocess reads) instead of the exact O.
import math
import sys
import zlib

import torch

sys.path.insert(0, "tests")
sys.path.insert(0, "tests/gpu")
import test_features_gpu as t  # noqa: E402
from flashsdpa import masks  # noqa: E402

ROWS = [("cas", masks.CAUSAL_BOTTOM_RIGHT, 2, 113, 1023, "test_features_dense[cas--1.0.1-g2-113x1023-bf16]"),
        ("a", masks.NO_MASK, 1, 7, 113, "test_features_dense[a--1.-1.0-g1-7x113-bf16]")]
for spec, mask, groups, sq, sk, node in ROWS:
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"tests/gpu/test_features_gpu.py::{node}".encode()))
    batch, heads_kv, d = 2, 2, 128
    heads = heads_kv * groups
    q = torch.randn(batch, heads, sq, d, generator=gen, device="cuda").bfloat16()
    k = torch.randn(batch, heads_kv, sk, d, generator=gen, device="cuda").bfloat16()
    v = torch.randn(batch, heads_kv, sk, d, generator=gen, device="cuda").bfloat16()
    dout = torch.randn(batch, heads, sq, d, generator=gen, device="cuda").bfloat16()
    mods = t._mods(spec, batch, heads, gen)
    scale = 1 / math.sqrt(d)
    ours = t._ours(q, k, v, dout, mods, None, **t._mask_kwargs(mask), scale=scale)
    tk = {"scale": scale, "mask": mask}
    ref = t._results(t.textbook, [q, k, v], mods, dout, torch.float64, **tk)
    pt = t._results(t.textbook, [q, k, v], mods, dout, torch.bfloat16, **tk)
    names = t._names(mods)
    print(f"== {node}")
    for name, o, p, r in zip(names, ours, pt, ref):
        if name.startswith("d_"):
            print(f"  {name}: ours {o.flatten()[:6].tolist()}\n    ref  {r.flatten()[:6].tolist()}\n"
                  f"    |ours-ref| {t.max_error(o, r):.3e}  |pt-ref| {t.max_error(p, r):.3e}")
    # The reference's gradient of the modifiers with delta from the rounded output: autograd of
    # the float64 textbook where out is replaced by its bf16 rounding in delta only.
    leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
    extra = [x.detach().double().requires_grad_() for x in (mods.slopes, mods.sinks) if x is not None]
    it = iter(extra)
    slopes = next(it) if mods.slopes is not None else None
    sinks = next(it) if mods.sinks is not None else None
    out, lse = t.textbook(*leaves, softcap=mods.softcap, slopes=slopes, sinks=sinks, dtype=torch.float64, **tk)
    exact = (dout.double() * out.detach()).sum(-1)
    rounded = (dout.double() * out.detach().bfloat16().double()).sum(-1)
    print(f"  delta: max |rounded - exact| {(rounded - exact).abs().max().item():.3e} of max |delta| "
          f"{exact.abs().max().item():.3e}")
    if sinks is not None:
        p_sink = torch.exp(sinks.detach()[None, :, None] - lse.detach())
        for label, delta in (("exact", exact), ("rounded", rounded)):
            d_sink = -(p_sink * delta).sum((0, 2))
            print(f"  d_sinks from {label} delta: max|. - ref| {(d_sink - ref[names.index('d_sinks')].double()).abs().max().item():.3e}")
