# test_dropout.py: dropout on CPU (issue 14): the Philox against Random123's known answers, the
# reference mask's layout and statistics, the expectation of the reference forward under it, and
# the routers' plumbing (generator use, rng state format, spec.dropout) with the launches mocked.
# The mask against PyTorch's flash kernel, bit for bit, is tests/gpu/test_dropout_gpu.py's.
from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import flashsdpa
from flashsdpa import _backend, dropout, masks, ops_dropout, reference, reference_dropout, routers
from flashsdpa.reference_features import Features
from helpers import assert_unbiased
from test_registration import LaunchRecorder, NativeRecorder, launches, native, same_meta  # noqa: F401

F16 = torch.float16


def words(counter: tuple[int, int, int, int], key: tuple[int, int], rounds: int) -> list[int]:
    out = reference_dropout.philox4x32(tuple(torch.tensor(c) for c in counter), key, rounds)  # type: ignore[arg-type]
    return [int(w) for w in out]


# Random123 (D. E. Shaw Research) examples/kat_vectors: philox4x32 with 7 and 10 rounds.
KAT = [
    (10, (0, 0, 0, 0), (0, 0), [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    (10, (0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    (10, (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
    (7, (0, 0, 0, 0), (0, 0), [0x5F6FB709, 0x0D893F64, 0x4F121F81, 0x4F730A48]),
    (7, (0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), [0x5207DDC2, 0x45165E59, 0x4D8EE751, 0x8C52F662]),
    (7, (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     [0x4DFCCABA, 0x190A87F0, 0xC47362BA, 0xB6B5242A]),
]  # fmt: skip


@pytest.mark.parametrize("rounds, counter, key, expected", KAT)
def test_philox_known_answers(rounds: int, counter: Any, key: Any, expected: list[int]) -> None:
    assert words(counter, key, rounds) == expected


def test_philox_vectorised_equals_scalar() -> None:
    """Broadcast tensors give each element's scalar answer (the limb arithmetic has no cross-talk)."""
    ctr = (torch.tensor([0, 0xFFFFFFFF, 0x243F6A88]), torch.tensor([0, 0xFFFFFFFF, 0x85A308D3]),
           torch.tensor([0, 0xFFFFFFFF, 0x13198A2E]), torch.tensor([0, 0xFFFFFFFF, 0x03707344]))  # fmt: skip
    got = reference_dropout.philox4x32(ctr, (0xA4093822, 0x299F31D0), 10)
    for i in range(3):
        one = words(tuple(int(c[i]) for c in ctr), (0xA4093822, 0x299F31D0), 10)  # type: ignore[arg-type]
        assert [int(w[i]) for w in got] == one


@pytest.mark.parametrize("p, threshold", [(0.1, 229), (0.25, 191), (0.5, 127), (0.0, 255), (0.9, 25)])
def test_keep_threshold(p: float, threshold: int) -> None:
    # flash_api.cpp: floor((1 - p) * 255) in float32; 0.9 * 255 = 229.5, (1 - 0.9f) * 255 = 25.49...
    assert reference_dropout.keep_threshold(p) == threshold
    assert reference_dropout.keep_rate(p) == (threshold + 1) / 256


def fragment_bytes(seed: int, offset: int, bh: int, row16: int, col32: int) -> dict[tuple[int, int], int]:
    """The 512 bytes of one 16 x 32 block, placed by the m16n8k16 C-fragment definition (PTX ISA:
    lane L holds c0, c1 at row L / 4, columns 2 (L % 4) + {0, 1} of its n8 tile; c2, c3 eight rows
    below), n8 tile t from Philox word t, element e from byte e: the forward construction, against
    which the reference's inverse map is checked."""
    placed = {}
    for lane in range(32):
        ctr = ((offset + bh * 32 + lane) & 0xFFFFFFFF, (offset + bh * 32 + lane) >> 32, row16, col32)
        out = words(ctr, (seed & 0xFFFFFFFF, seed >> 32), 7)
        for t in range(4):
            for e in range(4):
                row = lane // 4 + 8 * (e // 2)
                col = 8 * t + 2 * (lane % 4) + e % 2
                placed[(row, col)] = (out[t] >> (8 * e)) & 0xFF
    return placed


@pytest.mark.parametrize("seed, offset", [(0, 0), (1234, 96), (2**64 - 3, 2**33 + 4)])
def test_mask_layout_from_fragment_definition(seed: int, offset: int) -> None:
    batch, heads, seqlen_q, seqlen_k, p = 2, 3, 37, 75, 0.3
    mask = reference_dropout.keep_mask(seed, offset, batch, heads, seqlen_q, seqlen_k, p)
    assert mask.shape == (batch, heads, seqlen_q, seqlen_k) and mask.dtype == torch.bool
    threshold = reference_dropout.keep_threshold(p)
    for b, h, r16, c32 in [(0, 0, 0, 0), (1, 2, 2, 2), (1, 1, 1, 0), (0, 2, 0, 1)]:
        placed = fragment_bytes(seed, offset, b * heads + h, r16, c32)
        for (r, c), byte in placed.items():
            i, j = r16 * 16 + r, c32 * 32 + c
            if i < seqlen_q and j < seqlen_k:
                assert bool(mask[b, h, i, j]) == (byte <= threshold), (b, h, i, j)


def test_mask_hand_worked_element() -> None:
    """Element (b=1, h=2, i=21, j=45) of a 3-head call: lane (21 % 8) * 4 + (45 % 8) // 2 = 22,
    block (1, 1), n8 tile (45 % 32) // 8 = 1, element 2 * ((21 % 16) // 8) + 45 % 2 = 1: bits 8..15
    of Philox word 1 at counter (offset + (1 * 3 + 2) * 32 + 22, 0, 1, 1)."""
    seed, offset, p = 0x0123456789ABCDEF, 4096, 0.5
    out = words((offset + 5 * 32 + 22, 0, 1, 1), (seed & 0xFFFFFFFF, seed >> 32), 7)
    byte = (out[1] >> 8) & 0xFF
    mask = reference_dropout.keep_mask(seed, offset, 2, 3, 22, 46, p)
    assert bool(mask[1, 2, 21, 45]) == (byte <= 127)


def test_mask_depends_on_the_state() -> None:
    base = reference_dropout.keep_mask(7, 0, 1, 2, 64, 64, 0.5)
    assert torch.equal(base, reference_dropout.keep_mask(7, 0, 1, 2, 64, 64, 0.5))
    for seed, offset in ((8, 0), (7, 4)):
        other = reference_dropout.keep_mask(seed, offset, 1, 2, 64, 64, 0.5)
        assert (other != base).float().mean() > 0.4  # independent masks differ on half the elements
    # Offsets of one call's heads never overlap the next call's: B * H * 32 apart.
    first = reference_dropout.keep_mask(7, 0, 1, 2, 16, 32, 0.5)
    second = reference_dropout.keep_mask(7, 64, 1, 2, 16, 32, 0.5)
    assert not torch.equal(first, second)


@pytest.mark.parametrize("p", [0.1, 0.25, 0.6])
def test_keep_rate_within_four_standard_errors(p: float) -> None:
    mask = reference_dropout.keep_mask(42, 0, 2, 4, 256, 256, p)
    n = mask.numel()
    rate = reference_dropout.keep_rate(p)
    se = math.sqrt(rate * (1 - rate) / n)
    assert abs(mask.float().mean().item() - rate) < 4 * se
    # Rows and columns within a block are not correlated into stripes: every 16 x 32 position keeps
    # about as often as the whole (a wrong byte map would leave some positions always kept).
    per_position = mask.unflatten(2, (-1, 16)).unflatten(4, (-1, 32)).float().mean(dim=(0, 1, 2, 4))
    se_pos = math.sqrt(rate * (1 - rate) / (n / 512))
    assert (per_position - rate).abs().max() < 5 * se_pos


def reference_out(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: float, keep: torch.Tensor | None
) -> torch.Tensor:
    shape = tuple(q.shape[:3]) + (k.shape[2],)
    features = None if keep is None else Features(shape, dropout_p=p, dropout_keep=keep)  # type: ignore[arg-type]
    out, _ = reference.attention_forward(q, k, v, scale=q.shape[-1] ** -0.5, features=features)
    return out


@pytest.mark.parametrize("p", [0.25, 0.1])
def test_expectation_over_seeds(p: float) -> None:
    """The mean output over many seeds is the output without dropout, times keep_rate / (1 - p)
    (1 at p = 0.25, where (191 + 1) / 256 = 0.75 exactly; 0.99826 at p = 0.1): assert_unbiased."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 24, 16, generator=gen) for _ in range(3))
    seeds = 300
    outs = torch.stack([
        reference_out(q, k, v, p, reference_dropout.keep_mask(seed, 0, 1, 2, 24, 24, p)) for seed in range(seeds)
    ])  # fmt: skip
    expected = reference_out(q, k, v, 0.0, None) * (reference_dropout.keep_rate(p) / (1 - p))
    assert_unbiased(outs, expected)


# ---- the routers' plumbing (the launches mocked) ---------------------------------------------------


class FakeGenerator:
    def __init__(self, seed: int, offset: int) -> None:
        self.seed, self.offset, self.sets = seed, offset, []

    def initial_seed(self) -> int:
        return self.seed

    def get_offset(self) -> int:
        return self.offset

    def set_offset(self, offset: int) -> None:
        self.sets.append(offset)
        self.offset = offset


@pytest.fixture
def generator(monkeypatch: pytest.MonkeyPatch) -> FakeGenerator:
    gen = FakeGenerator(2**63 + 5, 128)
    monkeypatch.setattr(torch.cuda, "default_generators", (gen,), raising=False)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    return gen


def test_flash_forward_router_serves_dropout(
    launches: LaunchRecorder, generator: FakeGenerator, fake_mode: Any
) -> None:
    q, k, v = (torch.empty(2, s, 4, 64, dtype=F16, device="cuda:0") for s in (16, 24, 24))
    ours = routers._flash_forward(None, q, k, v, None, None, 16, 24, 0.1, True, False)
    meta = torch.ops.aten._flash_attention_forward.default(q, k, v, None, None, 16, 24, 0.1, True, False)
    assert len(ours) == 5 and same_meta(ours[0], meta[0]) and same_meta(ours[1], meta[1])
    for i in (2, 3):  # PyTorch's rng state: uint64[2] (seed, offset) and an unused uint64[]
        assert ours[i].shape == meta[i].shape and ours[i].dtype == meta[i].dtype == torch.uint64
    # The generator gave (seed, offset) and moved on by B * H * 32, as PyTorch's flash kernel takes it.
    assert generator.sets == [128 + 2 * 4 * 32]
    [(name, _)] = launches.calls
    drop = launches.kwargs[0]["dropout"]
    assert name == "launch_fwd" and drop[:5] == (0.1, 2**63 + 5, 128, 0, 0)  # values, no pointers
    assert drop[5] == ours[2].data_ptr()  # the kernel writes the rng state


def test_sdpa_forward_router_serves_dropout(launches: LaunchRecorder, generator: FakeGenerator, fake_mode: Any) -> None:
    q = torch.empty(3, 2, 40, 128, dtype=F16, device="cuda:0")
    ours = routers._sdpa_flash_forward(None, q, q, q, 0.25, False)
    meta = torch.ops.aten._scaled_dot_product_flash_attention.default(q, q, q, 0.25, False)
    assert len(ours) == 9 and ours[6].dtype == meta[6].dtype == torch.uint64 and ours[6].shape == meta[6].shape
    assert generator.sets == [128 + 3 * 2 * 32]
    assert launches.kwargs[0]["dropout"][:3] == (0.25, 2**63 + 5, 128)
    assert flashsdpa.stats()["ops"]["aten::_scaled_dot_product_flash_attention"]["served"] >= 1


def test_backward_routers_read_the_rng_state(launches: LaunchRecorder, fake_mode: Any) -> None:
    q = torch.empty(2, 16, 4, 64, dtype=F16, device="cuda:0")
    out, grad_out = torch.empty_like(q), torch.empty_like(q)
    lse = torch.empty(2, 4, 16, dtype=torch.float32, device="cuda:0")
    rng = torch.empty(2, dtype=torch.uint64, device="cuda:0")
    unused = torch.empty((), dtype=torch.uint64, device="cuda:0")
    args = (grad_out, q, q, q, out, lse, None, None, 16, 16, 0.1, False, rng, unused)
    routers._flash_backward(None, *args)
    drop = launches.kwargs[0]["dropout"]
    # Pointers into the forward's rng state: the kernel reads (seed, offset) on the device.
    assert drop == (0.1, 0, 0, rng.data_ptr(), rng.data_ptr() + 8, 0)


@pytest.mark.parametrize(
    "dtype, shape, reason",
    [
        (torch.int64, (2,), "rng state torch.int64 (2,): needs PyTorch's flash format"),
        (torch.uint64, (), "rng state torch.uint64 (): needs PyTorch's flash format"),
    ],
)
def test_backward_falls_back_on_another_rng_format(
    dtype: torch.dtype, shape: tuple[int, ...], reason: str, fake_build: Any, native: NativeRecorder, fake_mode: Any
) -> None:
    """An rng state not in PyTorch's current format (older torch's int64 scalars) is PyTorch's to read."""
    flashsdpa.reset_stats()
    q = torch.empty(2, 16, 4, 64, dtype=F16, device="cuda:0")
    lse = torch.empty(2, 4, 16, dtype=torch.float32, device="cuda:0")
    state = torch.empty(shape, dtype=dtype, device="cuda:0")
    args = (q, q, q, q, q, lse, None, None, 16, 16, 0.1, False, state, state)
    assert routers._flash_backward("keys", *args) == "native result"
    [why] = flashsdpa.stats()["fallback_reasons"]
    assert reason in why


@pytest.mark.parametrize(
    "call, reason",
    [
        (dict(cum=True), "with packed (varlen) inputs: not served"),
        (dict(p=1.0), "dropout_p=1.0: needs a float in (0, 1)"),
        (dict(debug=True), "return_debug_mask=True"),
    ],
)
def test_dropout_fallbacks(
    call: dict[str, Any], reason: str, fake_build: Any, native: NativeRecorder, fake_mode: Any
) -> None:
    flashsdpa.reset_stats()
    if call.get("cum"):
        q = torch.empty(30, 4, 64, dtype=F16, device="cuda")
        cu = torch.empty(3, dtype=torch.int32, device="cuda")
        args = (q, q, q, cu, cu, 16, 16, 0.1, False, False)
    else:
        q = torch.empty(2, 16, 4, 64, dtype=F16, device="cuda")
        args = (q, q, q, None, None, 16, 16, call.get("p", 0.1), False, call.get("debug", False))
    assert routers._flash_forward("keys", *args) == "native result"
    [why] = flashsdpa.stats()["fallback_reasons"]
    assert reason in why


def test_dropout_with_alibi_falls_back(fake_build: Any, native: NativeRecorder, fake_mode: Any) -> None:
    flashsdpa.reset_stats()
    q = torch.empty(2, 16, 4, 64, dtype=F16, device="cuda")
    slopes = torch.empty(4, dtype=torch.float32, device="cuda")
    args = (q, q, q, None, None, 16, 16, 0.1, False, False)
    assert routers._flash_forward("keys", *args, alibi_slopes=slopes) == "native result"
    assert "with alibi_slopes: no kernel serves both" in next(iter(flashsdpa.stats()["fallback_reasons"]))


@pytest.mark.parametrize("sm90", [True, False], ids=["deterministic-family", "portable-only"])
def test_deterministic_dropout_backward(
    launches: LaunchRecorder, fake_build: Any, native: NativeRecorder, fake_mode: Any, deterministic: Any, sm90: bool
) -> None:
    """Under deterministic algorithms a dropout backward runs ours where the table has a family
    with a deterministic backward (the sm90 one, whose kDropout backward keeps the ordered dQ adds),
    with the forward's rng state; without one it goes to PyTorch (whose flash backward is
    deterministic)."""
    fake_build(deterministic_backward=sm90)
    deterministic(False)
    flashsdpa.reset_stats()
    q = torch.empty(2, 16, 4, 64, dtype=F16, device="cuda")
    lse = torch.empty(2, 4, 16, dtype=torch.float32, device="cuda")
    rng = torch.empty(2, dtype=torch.uint64, device="cuda")
    args = (q, q, q, q, q, lse, None, None, 16, 16, 0.1, False, rng, rng)
    result = routers._flash_backward("keys", *args)
    if sm90:
        assert not native.calls and [name for name, _ in launches.calls] == ["launch_bwd"]
        assert launches.kwargs[0]["dropout"] == (0.1, 0, 0, rng.data_ptr(), rng.data_ptr() + 8, 0)
        assert len(result) == 3
    else:
        assert result == "native result" and not launches.calls
        assert "deterministic" in next(iter(flashsdpa.stats()["fallback_reasons"]))


def test_dropout_feature_bit_reaches_select(fake_build: Any, fake_mode: Any) -> None:
    q = torch.empty(2, 4, 32, 64, dtype=F16, device="cuda")
    assert flashsdpa.explain(q, q, q, dropout_p=0.1) == []
    assert flashsdpa.explain(q, q, q, dropout_p=0.1, softcap=30.0) == [
        "dropout_p=0.1 with attn_mask or score modifiers: no kernel serves both"
    ]
    assert _backend.FEATURE_BITS["dropout"] == 16
    assert masks.NO_MASK == (-1, -1, 0)


def test_rng_state_values_reads_pytorchs_format() -> None:
    state = torch.tensor([2**64 - 1, 96], dtype=torch.uint64)
    assert reference_dropout.rng_state_values(state) == (2**64 - 1, 96)
    assert dropout.rng_state_reason(state, torch.device("cpu")) is None
    # The debug option: the mask of a call from its rng state.
    mask = reference_dropout.keep_mask_of(state, 1, 2, 20, 40, 0.3)
    assert torch.equal(mask, reference_dropout.keep_mask(2**64 - 1, 96, 1, 2, 20, 40, 0.3))


# ---- the direct API's ops (ops_dropout.py), the launches mocked --------------------------------------


def test_direct_api_dropout_ops_plumbing(launches: LaunchRecorder, generator: FakeGenerator, fake_mode: Any) -> None:
    q = torch.empty(2, 4, 40, 64, dtype=F16, device="cuda:0")
    k = torch.empty(2, 2, 50, 64, dtype=F16, device="cuda:0")
    out, lse, rng = ops_dropout._fwd_cuda(q, k, k, 0.125, [-1, 0, 0], 0.2)
    assert out.shape == (2, 4, 40, 64) and lse.shape == (2, 4, 40) and rng.dtype == torch.uint64 and rng.shape == (2,)
    assert generator.sets == [128 + 2 * 4 * 32]  # B * Hq * 32, as PyTorch's flash op takes it
    assert launches.kwargs[0]["dropout"] == (0.2, 2**63 + 5, 128, 0, 0, rng.data_ptr())
    assert launches.calls[0][1][6] == (-1, 0, 0)  # the direct API's masks (top-left causal here) pass through
    ops_dropout._bwd_cuda(q, q, k, k, out, lse, rng, 0.125, [-1, 0, 0], 0.2)
    assert launches.kwargs[1]["dropout"] == (0.2, 0, 0, rng.data_ptr(), rng.data_ptr() + 8, 0)


def test_attention_takes_the_dropout_op_on_cuda(fake_build: Any, fake_mode: Any) -> None:
    """flashsdpa.attention(dropout_p=...) on CUDA: the fwd_dropout op (its fake kernel here); with
    attn_mask as well it is not served (NotImplementedError, never a silent other mask)."""
    q = torch.empty(1, 2, 32, 64, dtype=F16, device="cuda")
    out = flashsdpa.attention(q, q, q, dropout_p=0.1, causal=True)
    assert out.shape == q.shape
    with pytest.raises(NotImplementedError, match="dropout_p"):
        flashsdpa.attention(q, q, q, dropout_p=0.1, attn_mask=torch.ones(32, 32, dtype=torch.bool, device="cuda"))


def test_capture_path_uses_pytorchs_kernel(monkeypatch: pytest.MonkeyPatch, fake_build: Any, fake_mode: Any) -> None:
    """The capture-safe path: PyTorch's flash kernel on a (B, 1, H, 8) dummy with the call's p
    advances the generator; our kernel reads (seed, offset) from its rng state on the device."""
    calls: list[tuple[Any, ...]] = []

    class Native:
        def call_boxed(self, keyset: Any, *args: Any) -> tuple[Any, ...]:
            calls.append(args)
            q = args[0]
            return (None, None, torch.empty(2, dtype=torch.uint64, device=q.device),
                    torch.empty((), dtype=torch.uint64, device=q.device), None)  # fmt: skip

    rng = dropout.take(0.3, 3, 5, torch.device("cuda:0"), Native(), via_torch=True)
    [args] = calls
    assert tuple(args[0].shape) == (3, 1, 5, 8) and args[3:] == (None, None, 1, 1, 0.3, False, False)
    addr = rng.philox_seed.data_ptr()
    assert rng.item == (0.3, 0, 0, addr, addr + 8, 0)  # pointers, no values, no rng state write
