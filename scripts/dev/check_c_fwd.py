"""check_c_fwd.py: the forward kernel through flashsdpa._C.fwd against a float32 reference, with
the rule max|ours - ref| <= 2 * max|torch_in_low_precision - ref| + 1e-5 (NaN-poisoned outputs,
fresh random inputs), then a timing against SDPA's flash backend. Needs a CUDA build of _C."""
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from flashsdpa import _C


def visible_mask(sq, sk, causal, device):
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    if causal == 0:
        return torch.ones(sq, sk, dtype=torch.bool, device=device)
    return j <= i + (sk - sq if causal == 2 else 0)


def reference(q, k, v, scale, causal):
    """(B, H, S, D) in any dtype -> out and natural-log LSE computed in q's dtype (fp32 for ref)."""
    g = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    s = (q @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(~visible_mask(q.shape[2], k.shape[2], causal, q.device), float("-inf"))
    lse = torch.logsumexp(s.float(), dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # rows with no key: 0
    return p @ v, torch.where(torch.isinf(lse), torch.full_like(lse, math.inf), lse)


def run_c_fwd(q, k, v, scale, causal, cu_q=None, cu_k=None, max_q=0, max_k=0):
    """q, k, v: (B, H, S, D) views (any strides), or packed (total, H, D) with cu_seqlens."""
    varlen = cu_q is not None
    if varlen:
        total, hq, dqk = q.shape
        out = torch.full((total, hq, v.shape[-1]), float("nan"), dtype=q.dtype, device=q.device)
        lse = torch.full((hq, total), float("nan"), dtype=torch.float32, device=q.device)
        st = lambda t: (0, t.stride(1), t.stride(0))  # noqa: E731
        args = (st(q), st(k), st(v), st(out), (0, lse.stride(0), lse.stride(1)),
                cu_q.numel() - 1, hq, k.shape[1], max_q, max_k, dqk, v.shape[-1],
                cu_q.data_ptr(), cu_k.data_ptr(), 0)
    else:
        b, hq, sq, dqk = q.shape
        out = torch.full((b, sq, hq, v.shape[-1]), float("nan"), dtype=q.dtype, device=q.device).transpose(1, 2)
        lse = torch.full((b, hq, sq), float("nan"), dtype=torch.float32, device=q.device)
        args = (q.stride()[:3], k.stride()[:3], v.stride()[:3], out.stride()[:3], lse.stride(),
                b, hq, k.shape[1], sq, k.shape[2], dqk, v.shape[-1], 0, 0, 0)
    _C.fwd(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), *args,
           scale, causal, 1 if q.dtype == torch.bfloat16 else 0, q.device.index,
           torch.cuda.current_stream().cuda_stream)
    return out, lse


def check(name, b, hq, hkv, sq, sk, dqk, dv, causal, dtype=torch.bfloat16, bshd=False, scale=None):
    dev = "cuda"
    scale = 1 / math.sqrt(dqk) if scale is None else scale
    def make(h, s, d):
        if bshd:  # SDPA's usual transposed view: rows are h * d apart
            return torch.randn(b, s, h, d, device=dev, dtype=dtype).transpose(1, 2)
        return torch.randn(b, h, s, d, device=dev, dtype=dtype)
    q, k, v = make(hq, sq, dqk), make(hkv, sk, dqk), make(hkv, sk, dv)
    out, lse = run_c_fwd(q, k, v, scale, causal)
    torch.cuda.synchronize()
    ref, ref_lse = reference(q.float(), k.float(), v.float(), scale, causal)
    low, _ = reference(q, k, v, scale, causal)
    err = (out.float() - ref).abs().max().item()
    bound = 2 * (low.float() - ref).abs().max().item() + 1e-5
    finite = torch.isfinite(ref_lse)
    lse_ok = torch.equal(torch.isinf(lse) & (lse > 0), ~finite) and (
        (lse[finite] - ref_lse[finite]).abs().max().item() < 1e-3 if finite.any() else True)
    ok = err <= bound and not out.isnan().any().item() and lse_ok
    print(f"{'ok' if ok else 'FAIL':4} {name:40} err {err:.2e} bound {bound:.2e} lse_ok {lse_ok}")
    return ok


def check_varlen(name, hq, hkv, lens_q, lens_k, d, causal, dtype=torch.bfloat16):
    dev = "cuda"
    cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device=dev)
    cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device=dev)
    q = torch.randn(sum(lens_q), hq, d, device=dev, dtype=dtype)
    k = torch.randn(sum(lens_k), hkv, d, device=dev, dtype=dtype)
    v = torch.randn(sum(lens_k), hkv, d, device=dev, dtype=dtype)
    scale = 1 / math.sqrt(d)
    out, lse = run_c_fwd(q, k, v, scale, causal, cu_q, cu_k, max(lens_q), max(lens_k))
    ok, worst = True, 0.0
    for i in range(len(lens_q)):
        qs, ks = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
        if lens_q[i] == 0:
            continue
        sub = lambda t, s: t[s].transpose(0, 1)[None]  # noqa: E731
        ref, ref_lse = reference(sub(q, qs).float(), sub(k, ks).float(), sub(v, ks).float(), scale, causal)
        low, _ = reference(sub(q, qs), sub(k, ks), sub(v, ks), scale, causal)
        err = (sub(out, qs).float() - ref).abs().max().item()
        worst = max(worst, err)
        ok &= err <= 2 * (low.float() - ref).abs().max().item() + 1e-5
        got_lse = lse[:, qs][None]
        finite = torch.isfinite(ref_lse)
        ok &= torch.equal(torch.isinf(got_lse) & (got_lse > 0), ~finite)
        if finite.any():
            ok &= (got_lse[finite] - ref_lse[finite]).abs().max().item() < 1e-3
    print(f"{'ok' if ok else 'FAIL':4} {name:40} err {worst:.2e}")
    return ok


def bench(d, s, causal):
    b, h = 16384 // s, 2048 // d
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    def timed(fn):
        for _ in range(3):
            fn()
        ts = []
        for _ in range(15):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(); fn(); e1.record(); e1.synchronize()
            ts.append(e0.elapsed_time(e1))
        return sorted(ts)[len(ts) // 2]
    ours = timed(lambda: run_c_fwd(q, k, v, 1 / math.sqrt(d), causal))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        theirs = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)))
    flops = 4 * b * h * s * s * d / (2 if causal else 1)
    print(f"_C.fwd d{d} S{s} causal{causal}: {flops / ours * 1e-9:.1f} TFLOP/s, flash {flops / theirs * 1e-9:.1f}"
          f" ({theirs / ours:.3f}x)")


def main():
    torch.manual_seed(0)
    results = [
        check("d128 c0 1000x1000", 2, 4, 4, 1000, 1000, 128, 128, 0),
        check("d128 c1 1000x1000 bshd", 2, 4, 4, 1000, 1000, 128, 128, 1, bshd=True),
        check("d128 c2 300x1000", 2, 4, 4, 300, 1000, 128, 128, 2),
        check("d128 c2 1000x300 (empty rows)", 2, 4, 4, 1000, 300, 128, 128, 2),
        check("d128 c1 1000x300 gqa 8/2", 1, 8, 2, 1000, 300, 128, 128, 1),
        check("d128 dv64 c0", 2, 2, 1, 257, 513, 128, 64, 0, bshd=True),
        check("sq1 sk1", 3, 2, 2, 1, 1, 128, 128, 0),
        check("sq1 sk4097 c2", 2, 4, 2, 1, 4097, 128, 128, 2),
        check("scale -0.2 c1", 1, 2, 2, 300, 500, 128, 128, 1, scale=-0.2),
        check_varlen("varlen c1", 4, 2, [0, 130, 1, 517], [300, 0, 1, 517], 128, 1),
        check_varlen("varlen c2", 4, 4, [5, 130, 700], [300, 7, 600], 128, 2),
    ]
    if "float16" in _C.build_info()["dtypes"]:
        results.append(check("fp16 d128 c1", 2, 4, 4, 700, 700, 128, 128, 1, dtype=torch.float16))
    print(f"_C.fwd checks: {len(results) - sum(results)} of {len(results)} failed")
    for causal in (0, 1):
        bench(128, 8192, causal)


if __name__ == "__main__":
    main()
