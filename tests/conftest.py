# conftest.py: what every test file shares: the `gpu` marker (skipped cleanly without a CUDA GPU
# and a CUDA build of flashsdpa._C), fixed seeds, a guard that no test leaves flashsdpa active, and
# the stand-in for a CUDA build of _C that lets the CPU suite exercise selection and routing.
from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import flashsdpa
from flashsdpa import _backend, activation


def _gpu_skip_reason() -> str | None:
    if not torch.cuda.is_available():
        return "needs a CUDA GPU (torch.cuda.is_available() is False)"
    return None


def _gpu_build_failure() -> str | None:
    """Why GPU tests must fail here: a GPU is present but _C has no CUDA kernels (or no _C)."""
    if torch.cuda.is_available() and not _backend.CUDA_KERNELS:
        return f"a CUDA GPU is present but flashsdpa._C has no CUDA kernels: {_backend.UNAVAILABLE_REASON}"
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU and a CUDA build of flashsdpa._C (skipped otherwise)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _gpu_skip_reason()
    if reason is not None:
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
    elif _gpu_build_failure() is not None:
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(pytest.mark.usefixtures("_gpu_build_required"))


@pytest.fixture
def _gpu_build_required() -> None:
    reason = _gpu_build_failure()
    if reason is not None:
        pytest.fail(reason, pytrace=False)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """One line per kernel bucket a narrowed build lacked, with how many tests skipped for it."""
    counts: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        message = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else ""
        if "narrowed build lacks " in message:
            bucket = message.split("narrowed build lacks ", 1)[1].split(":", 1)[0]
            counts[bucket] = counts.get(bucket, 0) + 1
    if counts:
        lacks = ", ".join(f"{bucket} ({n} tests)" for bucket, n in sorted(counts.items()))
        terminalreporter.write_line(f"flashsdpa: this build is narrowed; skipped for lack of {lacks}")


@pytest.fixture(autouse=True)
def _seeded() -> None:
    random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _left_inactive() -> Iterator[None]:
    """Every test must leave flashsdpa as it found it: a leak would change later tests' SDPA."""
    order = torch._C._get_sdp_priority_order()
    yield
    leaked = flashsdpa.is_active()
    while flashsdpa.is_active():  # clean up so one failure does not cascade
        activation._release()
    activation._installed = False
    torch._C._set_sdp_priority_order(order)
    assert not leaked, "the test left flashsdpa active"


# ---- a stand-in for a CUDA build of _C -----------------------------------------------------------


class FakeCudaBuild:
    """Answers like a CUDA build of flashsdpa._C on one GPU; records launches instead of running them.

    ``head_dim_bucket`` follows _C's rule: the smallest compiled head dim holding max(dqk, dv).
    """

    def __init__(
        self,
        head_dims: tuple[int, ...] = (64, 128, 256),
        dtypes: tuple[str, ...] = ("float16", "bfloat16"),
        capability: tuple[int, int] = (9, 0),
        family: str | None = "sm80",
        with_cuda: bool = True,
        smem_optin_bytes: int = 232448,
        decode_max_seqlen_q: int = 16,
        deterministic_backward: bool = False,
        decode_features: int = 8,
        fwd_workspace: int = 0,
    ) -> None:
        # fwd_workspace: what fwd_workspace_bytes answers (the sm90 forward's split tail), 0 = none.
        self.fwd_workspace = fwd_workspace
        self.workspace_asked: list[tuple[Any, ...]] = []
        # decode_features: the feature bits the decode path takes (capabilities.cpp's
        # decode_features; the sm80 family's: the bias, 8); 0 mimics a table whose decode path
        # takes no modifier (the masked routers then leave decode-sized calls to PyTorch).
        self.decode_features = decode_features
        # deterministic_backward: a family with a bitwise-reproducible backward (the sm90 one on a
        # Hopper part) serves every backward the table serves; False: the portable family alone.
        self.deterministic_backward = deterministic_backward
        self.smem_optin_bytes = smem_optin_bytes
        self.DECODE_MAX_SEQLEN_Q = decode_max_seqlen_q  # _C's module constants
        self.MAX_SPLITS = 128
        self.head_dims = head_dims
        self.dtypes = dtypes
        self.capability = capability
        self.family = family
        self.with_cuda = with_cuda
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def build_info(self) -> dict[str, Any]:
        return {
            "version": "0.1.0",
            "with_cuda": self.with_cuda,
            "cuda_version": "13.0" if self.with_cuda else None,
            "archs": [80, 90] if self.with_cuda else [],
            "dtypes": list(self.dtypes) if self.with_cuda else [],
            "head_dims": list(self.head_dims) if self.with_cuda else [],
            "kernel_families": ["sm80"] if self.with_cuda else [],
            "max_head_dim": 256,
        }

    def device_info(self, index: int) -> dict[str, Any]:
        major, minor = self.capability
        return {
            "name": "Fake GPU",
            "major": major,
            "minor": minor,
            "sms": 132,
            "smem_optin_bytes": self.smem_optin_bytes,
            "family": self.family,
        }

    def head_dim_bucket(self, head_dim_qk: int, head_dim_v: int) -> int:
        return next((d for d in self.head_dims if d >= max(head_dim_qk, head_dim_v)), 0)

    def capabilities(self) -> dict[str, Any]:
        if not self.with_cuda:
            return {"families": [], "reason": "flashsdpa._C was built without CUDA (no nvcc at build time)"}
        family = {
            "family": "sm80",
            "runs_on": "compute capability 8.0 and newer",
            "min_capability": (8, 0),
            "max_capability": None,
            "archs": [80, 90],
            "dtypes": list(self.dtypes),
            "head_dims": list(self.head_dims),
            "head_dims_by_direction": {"forward": list(self.head_dims), "backward": list(self.head_dims)},
            "head_dim_rule": "multiples of 8",
            "masks": ["none", "causal_top_left", "causal_bottom_right", "window"],
            "layouts": ["dense", "varlen", "decode"],
            "layouts_by_direction": {"forward": ["dense", "varlen", "decode"], "backward": ["dense", "varlen"]},
            "directions": ["forward", "backward"],
            "features": ["softcap", "alibi", "sinks", "bias", "dropout"],
            "features_by_direction": {
                d: ["softcap", "alibi", "sinks", "bias", "dropout"] for d in ("forward", "backward")
            },
            "smem_per_tile": [],
        }
        return {"families": [family], "reason": None}

    def select(
        self,
        device: int,
        dtype: int,
        head_dim_qk: int,
        head_dim_v: int,
        mask: int,
        varlen: bool,
        backward: int,
        features: int = 0,
    ) -> tuple[Any, ...]:
        # An H100-sized part serves every bucket; smem_optin_bytes below 227 KB drops the largest backward.
        # backward 2: under torch.use_deterministic_algorithms(True), as _C.select takes it.
        bucket = self.head_dim_bucket(head_dim_qk, head_dim_v)
        if bucket == 0:
            return (None, 0, -1, 0, f"family sm80: head_dim_qk={head_dim_qk}: no bucket")
        if backward and max(head_dim_qk, head_dim_v) > 128 and self.smem_optin_bytes < 232448:
            return (None, 0, -1, 0, f"family sm80: no tile fits the device's {self.smem_optin_bytes // 1024} KB")
        if varlen == 2 and features & ~self.decode_features:  # check_features' decode list
            names = ", ".join(n for n, b in (("softcap", 1), ("alibi", 2), ("sinks", 4), ("bias", 8), ("dropout", 16))
                              if features & ~self.decode_features & b)  # fmt: skip
            return (None, 0, -1, 0, f"family sm80: {names}: not served by the sm80 family's decode path")
        if features & 16 and features & 15:  # capabilities.cpp's check_features
            return (None, 0, -1, 0, "family sm80: dropout with score modifiers or a bias: no kernel of the sm80 "
                    "family has both")  # fmt: skip
        if backward == 2:
            if self.deterministic_backward and not varlen:  # sm90 (dropout included: its kDropout backward)
                return ("sm90", bucket, 0, 231528, None)
            return (None, 0, -1, 0, "family sm80: torch.use_deterministic_algorithms(True): the sm80 family's "
                    "backward adds dQ with float atomics in any order (not bitwise reproducible)")  # fmt: skip
        return ("sm80", bucket, 0, 163840, None)

    def decode_plan(
        self, device: int, dtype: int, sizes: tuple[int, ...], mask: int, kv_cache: bool, num_splits: int,
        features: int = 0,
    ) -> tuple[Any, ...]:
        # Like _C's: dense calls only up to DECODE_MAX_SEQLEN_Q query rows, the decode path's
        # features only; 3 splits unless forced.
        batch, heads_q, _, seqlen_q, _, _, head_dim_v = sizes
        if not kv_cache and seqlen_q > self.DECODE_MAX_SEQLEN_Q:
            return (None, 0, 0, 0, f"seqlen_q={seqlen_q} > {self.DECODE_MAX_SEQLEN_Q}")
        if features & ~self.decode_features:
            return (None, 0, 0, 0, f"features {features}: not served by the sm80 family's decode path")
        splits = num_splits or 3
        rows = batch * heads_q * seqlen_q * splits if splits > 1 else 0
        return ("sm80", splits, rows * head_dim_v * 4, rows * 4, None)

    def fwd_workspace_bytes(self, spec: tuple[Any, ...]) -> int:
        self.workspace_asked.append(spec)
        return self.fwd_workspace

    def fwd(self, *args: Any) -> None:
        self.calls.append(("fwd", args))

    def bwd(self, *args: Any) -> None:
        self.calls.append(("bwd", args))


@pytest.fixture
def deterministic() -> Iterator[Callable[[bool], None]]:
    """Turns torch.use_deterministic_algorithms on (warn_only as given) and restores it after."""
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())

    def turn_on(warn_only: bool) -> None:
        torch.use_deterministic_algorithms(True, warn_only=warn_only)

    yield turn_on
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])


@pytest.fixture
def fake_build() -> Iterator[Any]:
    """Swap in a FakeCudaBuild; call the yielded function with FakeCudaBuild's arguments to
    reconfigure. The real _C (or its absence) is restored afterwards."""
    saved = (_backend._C, _backend.IMPORT_ERROR)

    def configure(**kwargs: Any) -> FakeCudaBuild:
        build = FakeCudaBuild(**kwargs)
        _backend._configure(build)
        return build

    configure()
    yield configure
    _backend._configure(*saved)


@pytest.fixture
def fake_mode() -> Iterator[Any]:
    """A FakeTensorMode: CUDA tensors with metadata and no data, even on a CPU-only torch."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        yield mode
