# test_fwd_many_tiles.py: the sm90 forward's persistent CTAs across many tiles each. The shape
# table's problems are too small for it (one tile per CTA), so each case here gives every CTA
# several tiles, with the boundaries between them that the K/V ring, the two Q slots and the tile
# queue must get right: tiles of one key block (a tile's Q slot released at its only Q K^T), tiles
# with no keys between tiles with keys (bottom-right causal with Sq > Sk; varlen sequences without
# keys or queries, and query blocks past a sequence's end), GQA, Dqk != Dv inside a bucket, the
# dynamic schedule (causal, windows) and the split tail (dense, >= 16 key blocks), both 16-bit
# dtypes. Each against the float64 reference with the project's rule (out and LSE), and again into
# NaN-poisoned outputs for the same bits. (Written for session 35's chained tiles, a losing variant
# at 0fb3214 that carried a tile's last turn into the next tile: kernel_notes_fwd_sm90.md.)
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
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

# tiles = B x Hq x ceil(Sq / block_m): block_m 128 (d128, d256), 192 (d64 at these lengths); 132 SMs.
# d256 (64-key blocks, one Q slot): O is staged in the tile's last K / V slots, which the next
# tile's second block reuses, so its cases cover the same boundaries.
CASES = [
    (Shape("one_block_tiles", 12, 40, 40, 100, 100, 128), masks.NO_MASK),  # 480 tiles of one key block
    (Shape("bench_s512", 8, 16, 16, 512, 512, 128), masks.NO_MASK),  # 512 tiles of 4 blocks
    (Shape("gqa_ragged_dv", 3, 24, 6, 777, 1029, 96, 72), masks.NO_MASK),  # 504 tiles, bucket 128
    (Shape("d64", 4, 16, 16, 1000, 700, 64), masks.NO_MASK),  # 384 tiles of 192 rows
    (Shape("d64_causal", 8, 16, 16, 1024, 1024, 64), masks.CAUSAL_TOP_LEFT),  # dynamic schedule
    (Shape("causal_q_longer", 2, 32, 32, 1500, 600, 128), masks.CAUSAL_BOTTOM_RIGHT),  # tiles without keys
    (Shape("split_tail", 3, 16, 16, 640, 2100, 128), masks.NO_MASK),  # 17 key blocks: the tail in pieces
    (Shape("window", 4, 16, 16, 1200, 1200, 128), (300, 0, masks.TOP_LEFT)),
    (Shape("d256_one_block_tiles", 6, 40, 40, 60, 60, 256), masks.NO_MASK),  # 240 tiles of one key block
    (Shape("d256", 4, 16, 16, 600, 700, 256), masks.NO_MASK),  # 320 tiles of 11 blocks
    (Shape("d256_causal_q_longer", 2, 24, 24, 900, 300, 256), masks.CAUSAL_BOTTOM_RIGHT),  # tiles without keys
]


def _check_family(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: masks.MaskSpec, varlen: _backend.Varlen | None = None
) -> None:
    """On an H100 / H200 these calls are the sm90 forward's (the persistent kernel)."""
    if torch.cuda.get_device_capability() != (9, 0) or not any(f["family"] == "sm90" for f in _backend.CAPABILITIES):
        return
    out = torch.empty((*q.shape[:-1], v.shape[-1]), device=DEVICE, dtype=q.dtype)
    lse = torch.empty(q.shape[1], q.shape[0], device=DEVICE) if varlen is not None else None  # varlen: (H, total)
    family, why = _backend._C.fwd_family(_backend._spec(q, k, v, out, lse, 1.0, mask, varlen))
    assert family == "sm90", (family, why)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("shape,mask", CASES, ids=[c[0].name for c in CASES])
def test_many_tiles_match_reference(
    request: pytest.FixtureRequest, shape: Shape, mask: masks.MaskSpec, dtype: str
) -> None:
    torch_dtype = DTYPES[dtype]
    skip_unless_compiled(torch_dtype, shape.head_dim, shape.dv)
    gen = torch.Generator(device=DEVICE).manual_seed(zlib.crc32(request.node.nodeid.encode()))
    q, k, v = make_qkv(shape, torch_dtype, DEVICE, layout="bshd", generator=gen)
    _check_family(q, k, v, mask)
    scale = default_scale(shape.head_dim)
    out = torch.full((*q.shape[:-1], v.shape[-1]), math.nan, device=DEVICE, dtype=torch_dtype)
    lse = torch.full(q.shape[:-1], math.nan, device=DEVICE, dtype=torch.float32)
    _backend.launch_fwd(q, k, v, out, lse, scale, mask)
    check_attention(q, k, v, None, out, None, lse, scale=scale, causal_mode=mask)
    again, again_lse = torch.full_like(out, math.nan), torch.full_like(lse, math.nan)
    _backend.launch_fwd(q, k, v, again, again_lse, scale, mask)
    assert torch.equal(again, out) and torch.equal(again_lse, lse), "the same launch must give the same bits"


@pytest.mark.parametrize("head_dim", [128, 256])
@pytest.mark.parametrize("causal", ["none", "bottom_right"])
def test_varlen_tiles_without_keys(request: pytest.FixtureRequest, causal: str, head_dim: int) -> None:
    """Packed sequences on 32 heads (1,792 tiles for the longest sequence's 8 query blocks): empty
    sequences (no queries: tiles past their end; no keys: tiles without keys) between the others,
    so a CTA meets every kind of next tile. Each sequence against its own float64 reference."""
    skip_unless_compiled(torch.bfloat16, head_dim)
    gen = torch.Generator(device=DEVICE).manual_seed(zlib.crc32(request.node.nodeid.encode()))
    lengths_q, lengths_k = (0, 130, 1, 517, 64, 300, 1000), (300, 0, 1, 517, 700, 77, 129)
    cu_q = torch.tensor([0, *torch.tensor(lengths_q).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    cu_k = torch.tensor([0, *torch.tensor(lengths_k).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    q = torch.randn(sum(lengths_q), 32, head_dim, generator=gen, device=DEVICE).to(torch.bfloat16)
    k, v = (torch.randn(sum(lengths_k), 8, head_dim, generator=gen, device=DEVICE).to(torch.bfloat16) for _ in "kv")
    mask = masks.CAUSAL_BOTTOM_RIGHT if causal == "bottom_right" else masks.NO_MASK
    varlen = (cu_q, cu_k, None, max(lengths_q), max(lengths_k))
    _check_family(q, k, v, mask, varlen)
    scale = default_scale(head_dim)
    kwargs: dict[str, object] = {"causal": causal != "none", "return_lse": True, "scale": scale}
    if causal == "bottom_right":
        kwargs["causal_alignment"] = "bottom_right"
    out, lse = flashsdpa.attention_varlen(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), **kwargs)
    out_p, lse_p = torch.full_like(out, math.nan), torch.full_like(lse, math.nan)
    _backend.launch_fwd(q, k, v, out_p, lse_p, scale, mask, varlen)
    torch.cuda.synchronize()
    assert torch.equal(out_p, out) and torch.equal(lse_p, lse), "a row left unwritten, or different bits"
    for b in range(len(lengths_q)):
        if lengths_q[b] == 0:
            continue
        rq = slice(int(cu_q[b]), int(cu_q[b + 1]))
        rk = slice(int(cu_k[b]), int(cu_k[b + 1]))
        if lengths_k[b] == 0:
            assert not out[rq].any() and torch.all(lse[:, rq] == math.inf), f"sequence {b} has no keys"
            continue
        one = [t[r].transpose(0, 1).unsqueeze(0) for t, r in ((q, rq), (k, rk), (v, rk))]
        check_attention(*one, None, out[rq].transpose(0, 1).unsqueeze(0), None, lse[:, rq].unsqueeze(0),
                        scale=scale, causal_mode=mask)  # fmt: skip


# compute-sanitizer's subset (`-k sanitizer_subset`): small problems that still give a CTA several
# tiles (more tiles than SMs), one-block tiles and a causal dynamic schedule with tiles of different lengths.
SANITIZER_CASES = [
    (Shape("san_one_block", 2, 80, 80, 100, 100, 128), masks.NO_MASK),  # 160 tiles
    # The d64 short tile (128 rows: causal, <= 1024 rows), 240 tiles. Not 600 rows: racecheck stops
    # there on "Internal Sanitizer Error" inside the tests' bf16 math reference (test_kernels.py's
    # san_short64; session 35 met it again, H100).
    (Shape("san_d64_causal", 2, 40, 40, 257, 257, 64), masks.CAUSAL_BOTTOM_RIGHT),
    # d256: 144 tiles, those of the first query block without keys, O staged where the next data lands.
    (Shape("san_d256_causal", 2, 24, 24, 300, 150, 256), masks.CAUSAL_BOTTOM_RIGHT),
]


@pytest.mark.parametrize("shape,mask", SANITIZER_CASES, ids=[c[0].name for c in SANITIZER_CASES])
def test_many_tiles_sanitizer_subset(request: pytest.FixtureRequest, shape: Shape, mask: masks.MaskSpec) -> None:
    test_many_tiles_match_reference(request, shape, mask, "bf16")
