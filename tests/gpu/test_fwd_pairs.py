# test_fwd_pairs.py: the sm90 d128 forward's CTA pairs (fwd_kernel_sm90.cuh's FwdTraitsSm90::kCluster:
# two CTAs of a cluster run query blocks 2u and 2u + 1 of one (head, batch) in step, each loading
# half of every K / V tile, which the TMA unit multicasts into both CTAs' rings). Unmasked dense
# calls with an even number of 128-row query blocks take them (tiles_sm90.cu's fwd_sm90_cluster);
# the split tail cuts pairs (test_split_tail.py's shapes run it too). Each case: the kernel that ran
# (its template's last argument, the cluster size, in the profiler's kernel name), the project's
# rule against float64 (out and LSE, NaN-poisoned), and the same bits as single CTAs where neither
# splits its tail (the same per-row arithmetic in the same key order: FLASHSDPA_SM90_FWD_CLUSTER=0
# in a process of its own, as the switch is read once).
from __future__ import annotations

import math
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch

from flashsdpa import _backend, masks
from helpers import Shape, check_attention, default_scale, gpu_skip_reason, make_qkv, skip_unless_compiled

GPU_SKIP = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU suite: {GPU_SKIP}")]

DEVICE = "cuda"

# (shape, dtype, pairs): query blocks of 128 rows, pairs where their count is even.
CASES = [
    (Shape("two_blocks_7_keys", 1, 2, 2, 256, 7, 128), torch.bfloat16, True),  # one key block, 7 of 128 rows
    (Shape("ragged", 2, 3, 3, 1023, 1500, 128), torch.float16, True),  # a partial last block on both axes
    (Shape("gqa", 2, 8, 2, 2048, 2048, 128), torch.bfloat16, True),  # 64 pairs: fewer than the workers
    (Shape("sq_gt_sk", 1, 4, 4, 2000, 113, 128), torch.bfloat16, True),  # one partial key block
    (Shape("narrow_dims", 2, 4, 4, 512, 640, 96, 72), torch.float16, True),  # bucket 128, Dqk != Dv
    (Shape("many_heads", 20, 100, 100, 256, 256, 128), torch.bfloat16, True),  # 2000 pairs, B*H 2000
    (Shape("odd_blocks", 2, 4, 4, 300, 500, 128), torch.bfloat16, False),  # 3 blocks: single CTAs
]

_KERNEL = "flashsdpa_fwd_sm90_kernel"


def _pairs_here() -> bool:
    return (torch.cuda.get_device_capability() == (9, 0) and "FLASHSDPA_FAMILY" not in os.environ
            and os.environ.get("FLASHSDPA_SM90_FWD_CLUSTER", "1") != "0"
            and any(f["family"] == "sm90" for f in _backend.CAPABILITIES))  # fmt: skip


def _launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    out = torch.full((*q.shape[:-1], v.shape[-1]), math.nan, device=DEVICE, dtype=q.dtype)
    lse = torch.full(q.shape[:-1], math.nan, device=DEVICE, dtype=torch.float32)
    _backend.launch_fwd(q, k, v, out, lse, scale, masks.NO_MASK)
    return out, lse


def _kernel_names(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        _launch(q, k, v, scale)
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if _KERNEL in e.name]


def _cluster_size(name: str) -> int:
    """The traits' last template argument: `..., false, 2> >(flashsdpa::FwdSm90Args)`."""
    args = name.split("FwdTraitsSm90<", 1)[1].split(">", 1)[0]
    return int(args.rsplit(",", 1)[1])


def _inputs(request: pytest.FixtureRequest, shape: Shape, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    skip_unless_compiled(dtype, shape.head_dim, shape.dv)
    gen = torch.Generator(device=DEVICE).manual_seed(zlib.crc32(request.node.nodeid.encode()))
    return make_qkv(shape, dtype, DEVICE, layout="bshd", generator=gen)


@pytest.mark.parametrize("shape,dtype,pairs", CASES, ids=[c[0].name for c in CASES])
def test_pairs_match_reference(request: pytest.FixtureRequest, shape: Shape, dtype: torch.dtype, pairs: bool) -> None:
    q, k, v = _inputs(request, shape, dtype)
    scale = default_scale(shape.head_dim)
    if _pairs_here():
        names = _kernel_names(q, k, v, scale)
        assert len(names) == 1, names
        assert _cluster_size(names[0]) == (2 if pairs else 1), names[0]
    out, lse = _launch(q, k, v, scale)
    check_attention(q, k, v, None, out, None, lse, scale=scale, causal_mode=masks.NO_MASK)


def test_masked_calls_take_single_ctas(request: pytest.FixtureRequest) -> None:
    """A causal pair would visit different key blocks: causal and windowed calls run single CTAs."""
    shape = Shape("causal", 1, 4, 4, 512, 512, 128)
    q, k, v = _inputs(request, shape, torch.bfloat16)
    if not _pairs_here():
        pytest.skip("the pairs run on an H100 / H200's sm90 family only")
    for mask in (masks.CAUSAL_TOP_LEFT, (100, 50, masks.TOP_LEFT)):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            out = torch.empty((*q.shape[:-1], v.shape[-1]), device=DEVICE, dtype=q.dtype)
            _backend.launch_fwd(q, k, v, out, None, 0.1, mask)
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if _KERNEL in e.name]
        assert names and all(_cluster_size(n) == 1 for n in names), names


def test_extreme_values(request: pytest.FixtureRequest) -> None:
    """q and k scaled 3x (logit spread ~9x the unit inputs': the online softmax rescales often) and
    a NaN in one key row (its head's rows NaN, the pair's other block too, nothing else)."""
    shape = Shape("extreme", 2, 4, 4, 1024, 1500, 128)
    q, k, v = _inputs(request, shape, torch.bfloat16)
    q, k = q * 3, k * 3
    scale = default_scale(shape.head_dim)
    out, lse = _launch(q, k, v, scale)
    check_attention(q, k, v, None, out, None, lse, scale=scale, causal_mode=masks.NO_MASK)
    k = k.clone()
    k[1, 2, 700] = math.nan
    bad, _ = _launch(q, k, v, scale)
    nan_heads = torch.isnan(bad).any(dim=-1).any(dim=-1)
    expected = torch.zeros_like(nan_heads)
    expected[1, 2] = True
    assert torch.equal(nan_heads, expected) and bool(torch.isnan(bad[1, 2]).all())
    assert torch.equal(bad[~expected], out[~expected])


_SINGLE = """
import sys, torch, zlib
from flashsdpa import _backend, masks
sys.path.insert(0, {tests!r})
from helpers import Shape, make_qkv, default_scale
shape = Shape("same_bits", 2, 6, 3, 1536, 1777, 128)
gen = torch.Generator(device="cuda").manual_seed(1234)
q, k, v = make_qkv(shape, torch.bfloat16, "cuda", layout="bshd", generator=gen)
out = torch.full((*q.shape[:-1], v.shape[-1]), float("nan"), device="cuda", dtype=q.dtype)
lse = torch.full(q.shape[:-1], float("nan"), device="cuda", dtype=torch.float32)
_backend.launch_fwd(q, k, v, out, lse, default_scale(128), masks.NO_MASK)
torch.save((out.cpu(), lse.cpu()), sys.argv[1])
"""


def test_same_bits_as_single_ctas(tmp_path: Path) -> None:
    """36 pairs of 14 key blocks (under kTailSplitMinBlocks: neither splits its tail) against single
    CTAs in another process."""
    skip_unless_compiled(torch.bfloat16, 128)
    if not _pairs_here():
        pytest.skip("the pairs run on an H100 / H200's sm90 family only")
    tests = str(Path(__file__).resolve().parents[1])
    script = _SINGLE.format(tests=tests)
    results = []
    for switch in ("1", "0"):
        path = tmp_path / f"out_{switch}.pt"
        env = dict(os.environ, FLASHSDPA_SM90_FWD_CLUSTER=switch)
        subprocess.run([sys.executable, "-c", script, str(path)], env=env, check=True, timeout=300)
        results.append(torch.load(path))
    (pairs, pairs_lse), (single, single_lse) = results
    assert not torch.isnan(pairs).any() and not torch.isnan(pairs_lse).any()
    assert torch.equal(pairs, single) and torch.equal(pairs_lse, single_lse)
