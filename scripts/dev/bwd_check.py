"""bwd_check.py: development check and benchmark of the sm80 backward kernels through flashsdpa._C.

Not a test suite (tests/ owns that): one script that the GPU call runs after the build, checking
dq/dk/dv against torch autograd in float32 with the project's rule
    max|ours - ref| <= 2 * max|torch_in_dtype - ref| + 1e-5
(outputs NaN-poisoned, fresh random inputs per case), then timing the backward against PyTorch's
flash backend (aten._scaled_dot_product_flash_attention_backward) in the same process.

    python scripts/dev/bwd_check.py [--check] [--bench] [--quick] [--accuracy]

The bench times (B, H, S, D) memory unless BENCH_LAYOUT=bshd (the package bench's default layout),
at head dims 64 and 128 unless BENCH_DIMS says otherwise (e.g. BENCH_DIMS=256; also for --accuracy).
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import torch

if os.environ.get("FLASHSDPA_C_DIR"):  # a bare CMake build dir: import its _C without the package
    sys.path.insert(0, os.environ["FLASHSDPA_C_DIR"])
    import _C  # type: ignore[import-not-found]
else:
    from flashsdpa import _C

DTYPE_CODE = {torch.float16: 0, torch.bfloat16: 1}
NONE, TOP_LEFT, BOTTOM_RIGHT = 0, 1, 2


# ---- reference -----------------------------------------------------------------------------------
def visible_mask(sq: int, sk: int, causal: int, device) -> torch.Tensor | None:
    if causal == NONE:
        return None
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    return j <= i + (0 if causal == TOP_LEFT else sk - sq)


def attention(q, k, v, scale, causal):
    """(B, Hq, Sq, D) attention in q's dtype; rows with no visible key give 0. Returns (o, lse)."""
    hq, hkv = q.shape[1], k.shape[1]
    if hq != hkv:
        k = k.repeat_interleave(hq // hkv, dim=1)
        v = v.repeat_interleave(hq // hkv, dim=1)
    s = (q @ k.transpose(-1, -2)) * scale
    mask = visible_mask(q.shape[2], k.shape[2], causal, q.device)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s.float(), dim=-1)
    p = torch.softmax(s, dim=-1)
    if mask is not None:
        p = p.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return p @ v, lse


def reference(q, k, v, do, scale, causal):
    """o (dtype), lse (+inf on empty rows) and float32 + in-dtype autograd gradients."""
    leaves32 = [t.detach().float().requires_grad_() for t in (q, k, v)]
    o32, lse = attention(*leaves32, scale, causal)
    grads32 = torch.autograd.grad(o32, leaves32, do.float())
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    o_lp, _ = attention(*leaves, scale, causal)
    grads_lp = torch.autograd.grad(o_lp, leaves, do)
    lse = torch.where(torch.isneginf(lse), torch.full_like(lse, float("inf")), lse)
    return o32.detach().to(q.dtype), lse.detach(), grads32, grads_lp


# ---- launch ----------------------------------------------------------------------------------------
def dense_bwd(do, q, k, v, o, lse, dq, dk, dv, scale, causal, workspace=None):
    b, hq, sq, dqk = q.shape
    hkv, sk, dv_dim = v.shape[1], v.shape[2], v.shape[3]
    sizes = _C.bwd_workspace_bytes(b, hq, sq, dqk, dv_dim, -1)
    if workspace is None:
        workspace = [torch.empty(n, dtype=torch.uint8, device=q.device) for n in sizes]
    dev = q.device.index
    _C.bwd(
        do.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
        dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
        do.stride()[:3], q.stride()[:3], k.stride()[:3], v.stride()[:3], o.stride()[:3], lse.stride(),
        dq.stride()[:3], dk.stride()[:3], dv.stride()[:3],
        b, hq, hkv, sq, sk, dqk, dv_dim, 0, 0, 0,
        scale, causal, DTYPE_CODE[q.dtype], workspace[0].data_ptr(), sizes[0], workspace[1].data_ptr(), sizes[1], -1, dev,
        torch.cuda.current_stream(dev).cuda_stream,
    )  # fmt: skip
    return workspace


def packed(t):  # (total, H, D) -> (batch, head, row) strides with batch unused
    return (0, t.stride(1), t.stride(0))


def varlen_bwd(do, q, k, v, o, lse, dq, dk, dv, cu_q, cu_k, max_q, max_k, scale, causal):
    total_q, hq, dqk = q.shape
    hkv, dv_dim = k.shape[1], v.shape[2]
    batch = cu_q.numel() - 1
    sizes = _C.bwd_workspace_bytes(batch, hq, max_q, dqk, dv_dim, total_q)
    ws = [torch.empty(n, dtype=torch.uint8, device=q.device) for n in sizes]
    dev = q.device.index
    _C.bwd(
        do.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
        dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
        packed(do), packed(q), packed(k), packed(v), packed(o), (0, lse.stride(0), lse.stride(1)),
        packed(dq), packed(dk), packed(dv),
        batch, hq, hkv, max_q, max_k, dqk, dv_dim, cu_q.data_ptr(), cu_k.data_ptr(), 0,
        scale, causal, DTYPE_CODE[q.dtype], ws[0].data_ptr(), sizes[0], ws[1].data_ptr(), sizes[1], total_q, dev,
        torch.cuda.current_stream(dev).cuda_stream,
    )  # fmt: skip


# ---- correctness -----------------------------------------------------------------------------------
def judge(name, ours, ref32, ref_lp, failures):
    ours = ours.float()
    if not torch.isfinite(ours).all():
        failures.append(f"{name}: non-finite ({(~torch.isfinite(ours)).sum().item()} elements)")
        return f"{name} NaN"
    err = (ours - ref32).abs().max().item()
    bound = 2 * (ref_lp.float() - ref32).abs().max().item() + 1e-5
    if err > bound:
        failures.append(f"{name}: err {err:.3e} > bound {bound:.3e}")
    return f"{name} {err:.1e}/{bound:.1e}"


def make(shape, dtype, layout):
    """A (B, H, S, D) view; layout 'bshd' allocates (B, S, H, D) and transposes (SDPA's common view)."""
    b, h, s, d = shape
    if layout == "bshd":
        return torch.randn(b, s, h, d, device="cuda", dtype=dtype).transpose(1, 2)
    return torch.randn(b, h, s, d, device="cuda", dtype=dtype)


def empty_like_layout(t, layout, fill=float("nan")):
    b, h, s, d = t.shape
    x = torch.empty(b, s, h, d, device="cuda", dtype=t.dtype).transpose(1, 2) if layout == "bshd" else \
        torch.empty(b, h, s, d, device="cuda", dtype=t.dtype)
    return x.fill_(fill)


def check_dense(b, hq, hkv, sq, sk, dqk, dvd, causal, dtype, layout="bhsd", scale=None):
    scale = 1.0 / math.sqrt(dqk) if scale is None else scale
    q = make((b, hq, sq, dqk), dtype, layout)
    k = make((b, hkv, sk, dqk), dtype, layout)
    v = make((b, hkv, sk, dvd), dtype, layout)
    do = make((b, hq, sq, dvd), dtype, layout)
    o, lse, g32, glp = reference(q, k, v, do, scale, causal)
    if layout == "bshd":
        o = o.transpose(1, 2).contiguous().transpose(1, 2)
    dq, dk, dv = (empty_like_layout(t, layout) for t in (q, k, v))
    dense_bwd(do, q, k, v, o, lse, dq, dk, dv, scale, causal)
    torch.cuda.synchronize()
    failures = []
    cols = [judge(n, x, r, l, failures) for n, x, r, l in zip(("dq", "dk", "dv"), (dq, dk, dv), g32, glp)]
    # dK and dV come from one CTA each with a fixed order: a second run must match bit for bit.
    dq2, dk2, dv2 = (empty_like_layout(t, layout) for t in (q, k, v))
    dense_bwd(do, q, k, v, o, lse, dq2, dk2, dv2, scale, causal)
    torch.cuda.synchronize()
    if not (torch.equal(dk, dk2) and torch.equal(dv, dv2)):
        failures.append("dk/dv differ between two runs (race)")
    return failures, " ".join(cols)


def check_varlen(seqs_q, seqs_k, hq, hkv, d, causal, dtype):
    scale = 1.0 / math.sqrt(d)
    cu_q = torch.tensor([0] + list(torch.tensor(seqs_q).cumsum(0)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(torch.tensor(seqs_k).cumsum(0)), dtype=torch.int32, device="cuda")
    tq, tk = sum(seqs_q), sum(seqs_k)
    q = torch.randn(tq, hq, d, device="cuda", dtype=dtype)
    k = torch.randn(tk, hkv, d, device="cuda", dtype=dtype)
    v = torch.randn(tk, hkv, d, device="cuda", dtype=dtype)
    do = torch.randn(tq, hq, d, device="cuda", dtype=dtype)
    o = torch.zeros_like(do)
    lse = torch.zeros(hq, tq, device="cuda")
    refs = {n: (torch.zeros(t.shape, device="cuda"), torch.zeros(t.shape, device="cuda")) for n, t in
            (("dq", q), ("dk", k), ("dv", v))}
    for i, (lq, lk) in enumerate(zip(seqs_q, seqs_k)):
        a, b_ = cu_q[i].item(), cu_q[i + 1].item()
        c, e = cu_k[i].item(), cu_k[i + 1].item()
        if lq == 0:
            continue
        if lk == 0:
            lse[:, a:b_] = float("inf")
            continue
        sl = lambda t, x, y: t[x:y].transpose(0, 1)[None]  # noqa: E731
        oi, li, g32, glp = reference(sl(q, a, b_), sl(k, c, e), sl(v, c, e), sl(do, a, b_), scale, causal)
        o[a:b_] = oi[0].transpose(0, 1)
        lse[:, a:b_] = li[0]
        for n, g, gl, x, y in (("dq", g32[0], glp[0], a, b_), ("dk", g32[1], glp[1], c, e), ("dv", g32[2], glp[2], c, e)):
            refs[n][0][x:y] = g[0].transpose(0, 1)
            refs[n][1][x:y] = gl[0].transpose(0, 1).float()
    dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
    varlen_bwd(do, q, k, v, o, lse, dq, dk, dv, cu_q, cu_k, max(seqs_q), max(seqs_k), scale, causal)
    torch.cuda.synchronize()
    failures = []
    cols = [judge(n, x, refs[n][0], refs[n][1], failures) for n, x in (("dq", dq), ("dk", dk), ("dv", dv))]
    return failures, " ".join(cols)


def run_checks(quick: bool) -> int:
    torch.manual_seed(0)
    dtypes = [torch.bfloat16, torch.float16]
    cases = []
    for dtype in dtypes:
        for d in (64, 128):
            for causal in (NONE, TOP_LEFT, BOTTOM_RIGHT):
                cases.append(("dense", dict(b=2, hq=4, hkv=4, sq=384, sk=384, dqk=d, dvd=d, causal=causal, dtype=dtype)))
    more = [
        dict(b=1, hq=8, hkv=2, sq=300, sk=517, dqk=128, dvd=128, causal=BOTTOM_RIGHT),  # GQA, Sk > Sq: unseen key blocks
        dict(b=1, hq=8, hkv=1, sq=517, sk=300, dqk=128, dvd=128, causal=BOTTOM_RIGHT),  # MQA, Sq > Sk: empty rows
        dict(b=2, hq=4, hkv=2, sq=517, sk=300, dqk=128, dvd=128, causal=TOP_LEFT),
        dict(b=1, hq=2, hkv=2, sq=1, sk=1000, dqk=128, dvd=128, causal=NONE),
        dict(b=1, hq=2, hkv=2, sq=1, sk=1000, dqk=128, dvd=128, causal=BOTTOM_RIGHT),
        dict(b=1, hq=2, hkv=2, sq=1000, sk=1, dqk=64, dvd=64, causal=NONE),
        dict(b=1, hq=2, hkv=2, sq=1000, sk=1, dqk=64, dvd=64, causal=TOP_LEFT),
        dict(b=2, hq=3, hkv=3, sq=113, sk=239, dqk=120, dvd=72, causal=NONE),  # dims below the bucket, qk != v
        dict(b=2, hq=3, hkv=3, sq=239, sk=113, dqk=40, dvd=64, causal=TOP_LEFT),
        dict(b=1, hq=2, hkv=1, sq=257, sk=257, dqk=96, dvd=96, causal=TOP_LEFT),
        dict(b=1, hq=2, hkv=2, sq=200, sk=333, dqk=256, dvd=256, causal=BOTTOM_RIGHT),
        dict(b=1, hq=2, hkv=2, sq=200, sk=200, dqk=192, dvd=160, causal=NONE),
        dict(b=1, hq=2, hkv=2, sq=129, sk=65, dqk=32, dvd=32, causal=NONE),
        dict(b=2, hq=4, hkv=2, sq=640, sk=640, dqk=128, dvd=128, causal=TOP_LEFT, layout="bshd"),
        dict(b=2, hq=4, hkv=4, sq=333, sk=333, dqk=64, dvd=64, causal=NONE, layout="bshd", scale=0.3),
    ]
    for dtype in dtypes[:1] if quick else dtypes:
        for c in more:
            cases.append(("dense", dict(c, dtype=dtype)))
    varlen = [
        dict(seqs_q=[100, 0, 257, 1, 64], seqs_k=[100, 7, 257, 300, 0], hq=4, hkv=2, d=128, causal=NONE),
        dict(seqs_q=[100, 0, 257, 1, 64], seqs_k=[100, 7, 257, 300, 0], hq=4, hkv=2, d=128, causal=BOTTOM_RIGHT),
        dict(seqs_q=[300, 129, 5], seqs_k=[200, 129, 400], hq=2, hkv=2, d=64, causal=TOP_LEFT),
    ]
    for c in varlen:
        cases.append(("varlen", dict(c, dtype=torch.bfloat16)))

    n_fail = 0
    builds = set(_C.build_info()["head_dims"])
    for kind, c in cases:
        d = max(c.get("dqk", c.get("d")), c.get("dvd", c.get("d")))
        if _C.head_dim_bucket(c.get("dqk", c.get("d")), c.get("dvd", c.get("d"))) == 0:
            continue
        try:
            failures, cols = (check_dense if kind == "dense" else check_varlen)(**c)
        except Exception as exc:  # noqa: BLE001 - report and go on
            failures, cols = [f"exception {type(exc).__name__}: {exc}"], ""
        tag = "FAIL" if failures else "ok"
        n_fail += bool(failures)
        desc = {k: (str(v).replace("torch.", "") if k == "dtype" else v) for k, v in c.items()}
        print(f"{tag:4} {kind:6} {desc} {cols} {'; '.join(failures)}", flush=True)
    print(f"checks: {len(cases) - n_fail} ok, {n_fail} failed (head dims built: {sorted(builds)})")
    return n_fail


def bench_dims() -> tuple[int, ...]:
    """Head dims of the accuracy comparison and the bench: BENCH_DIMS (e.g. "256"), else 64 and 128."""
    return tuple(int(x) for x in os.environ.get("BENCH_DIMS", "64,128").split(","))


# ---- accuracy against PyTorch's flash backend ------------------------------------------------------
def run_accuracy() -> None:
    """Error of our gradients and of PyTorch flash's (FA2), both against float32 autograd, same inputs:
    max and mean |error| ratios ours / flash per gradient (1.0 = as accurate as FA2)."""
    torch.manual_seed(1)
    print(f"{'d':>4} {'causal':>6} " + " ".join(f"{g + '_max':>8} {g + '_mean':>8}" for g in ("dq", "dk", "dv")))
    for d in bench_dims():
        for causal in (False, True):
            b, h, s = 2, 8, 1024
            q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
            scale = 1.0 / math.sqrt(d)
            _, _, grads32, _ = reference(q, k, v, do, scale, int(causal))
            out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
            o, lse = out[0], out[1]
            flash = torch.ops.aten._scaled_dot_product_flash_attention_backward(
                do, q, k, v, o, lse, out[2], out[3], out[4], out[5], 0.0, causal, out[6], out[7], scale=scale)
            ours = [torch.empty_like(t) for t in (q, k, v)]
            dense_bwd(do, q, k, v, o, lse, *ours, scale, int(causal))
            cols = []
            for mine, theirs, ref in zip(ours, flash, grads32):
                e_mine, e_theirs = (mine.float() - ref).abs(), (theirs.float() - ref).abs()
                cols += [e_mine.max().item() / e_theirs.max().item(), e_mine.mean().item() / e_theirs.mean().item()]
            print(f"{d:4d} {causal!s:>6} " + " ".join(f"{c:8.2f}" for c in cols), flush=True)


# ---- benchmark -------------------------------------------------------------------------------------
def bench_ms(fn, reps=10, warmup=3):
    for _ in range(warmup):
        fn()
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(start, end))
    return times[len(times) // 2]


def run_bench(quick: bool):
    from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: F401 - flash backend must exist

    rows = []
    seqlens = (2048, 8192) if quick else (2048, 4096, 8192, 16384)
    if os.environ.get("BENCH_SEQLENS"):  # e.g. "2048,16384"
        seqlens = tuple(int(x) for x in os.environ["BENCH_SEQLENS"].split(","))
    for d in bench_dims():
        for causal in (False, True):
            for s in seqlens:
                b, h = max(1, 16384 // s), 2048 // d
                if os.environ.get("BENCH_LAYOUT") == "bshd":  # transposed views, as models pass them
                    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
                                   for _ in range(4))
                else:
                    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
                scale = 1.0 / math.sqrt(d)
                out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
                o, lse = out[0], out[1]
                cu_q, cu_k, mq, mk, seed, off = out[2], out[3], out[4], out[5], out[6], out[7]

                def torch_bwd():
                    torch.ops.aten._scaled_dot_product_flash_attention_backward(
                        do, q, k, v, o, lse, cu_q, cu_k, mq, mk, 0.0, causal, seed, off, scale=scale)

                dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
                ws = dense_bwd(do, q, k, v, o, lse, dq, dk, dv, scale, int(causal))

                def ours():
                    dense_bwd(do, q, k, v, o, lse, dq, dk, dv, scale, int(causal), ws)

                flops = 2.5 * 4 * b * h * s * s * d / (2 if causal else 1)
                t_ref, t_ours = bench_ms(torch_bwd), bench_ms(ours)
                t_ref2 = bench_ms(torch_bwd)  # repeat: the spread says what a difference means
                rows.append((d, causal, s, b, h, flops / t_ours / 1e9, flops / min(t_ref, t_ref2) / 1e9,
                             abs(t_ref - t_ref2) / t_ref))
                print(f"d={d} causal={causal} s={s}: ours {flops / t_ours / 1e9:.0f} TFLOP/s, torch flash "
                      f"{flops / t_ref / 1e9:.0f}/{flops / t_ref2 / 1e9:.0f}", flush=True)
    print(f"{'d':>4} {'causal':>6} {'seqlen':>6} {'b':>3} {'h':>3} {'ours':>7} {'flash':>7} {'ratio':>6} {'spread':>6}")
    for d, c, s, b, h, ours, ref, spread in rows:
        print(f"{d:4d} {str(c):>6} {s:6d} {b:3d} {h:3d} {ours:7.0f} {ref:7.0f} {ours / ref:6.2f} {spread:6.1%}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--accuracy", action="store_true", help="gradient error ratios against PyTorch flash")
    args = ap.parse_args()
    if not (args.check or args.bench or args.accuracy):
        args.check = args.bench = True
    print(torch.__version__, torch.cuda.get_device_name(), _C.build_info(), flush=True)
    fails = run_checks(args.quick) if args.check else 0
    if args.accuracy:
        run_accuracy()
    if args.bench:
        run_bench(args.quick)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
