"""shim_cost.py: what flashsdpa's shim costs on the host, per call and per training step (issue 9).

Two modes:

    PYTHONPATH=python python3 scripts/dev/shim_cost.py --cpu   # any machine: the shim's Python alone
    PYTHONPATH=python python3 scripts/dev/shim_cost.py         # a CUDA GPU: the issue's table

--cpu times flashsdpa's own host code with the kernel launch mocked (a stand-in _C whose fwd / bwd
do nothing, CPU tensors that answer is_cuda=True): the SDPA entry on each road, the router bodies
with their allocations and argument marshalling, the pieces of each, and the dispatcher's cost of
calling a Python kernel, and an unrelated op inside and outside enable(). (That a model's eager
step runs flashsdpa Python only for SDPA is counted, not timed: tests/test_entry.py.)

The GPU mode prints, against PyTorch's own flash kernel on the same call (interleaved rounds,
medians, microseconds or milliseconds of wall time):
- tiny SDPA call 1x1x16x64 bf16: forward without grad (PyTorch writes the LSE, our eager path does
  not: the aten op rows compare equal work, both writing it), forward with grad, backward alone,
  a training step (forward + backward);
- a small model's train step, B8 x S128, hidden 256, 4 layers, fp32 and bf16 (Hugging Face Llama
  if transformers imports, else a plain torch decoder): PyTorch default, PyTorch flash only,
  inside flashsdpa.enable();
- attention alone, B8 H16 S256 D64 causal, fwd + bwd: FA2, cuDNN, default, ours; wall time per
  step, host time to issue one (no synchronization) and the GPU time of the step replayed in a CUDA
  graph, so that the gap to cuDNN splits into host and kernel time;
- a decode-shaped call (one token of Hugging Face's generation, issue 11): host time to issue and
  GPU time, FA2, cuDNN, default and ours.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode

import flashsdpa
from flashsdpa import _backend, entry, masks, routers, selection
from flashsdpa.bench.timing import graph_us
from flashsdpa.info import collect_info

Row = tuple[str, Callable[[], Any], Callable[[], contextlib.AbstractContextManager[Any]]]


def _interleaved(
    rows: list[Row], rounds: int, calls: int, sync: Callable[[], None], clock: Callable[[], float] = time.perf_counter
) -> dict[str, list[float]]:
    """Per row, one sample per round of microseconds per call on ``clock`` (wall time by default);
    every round times every row in turn, so clock and load drift hit all rows alike."""
    samples: dict[str, list[float]] = {name: [] for name, _, _ in rows}
    for _ in range(rounds):
        for name, fn, context in rows:
            with context():
                for _ in range(max(calls // 20, 5)):
                    fn()
                sync()
                start = clock()
                for _ in range(calls):
                    fn()
                sync()
                samples[name].append((clock() - start) / calls * 1e6)
    return samples


def _print(samples: dict[str, list[float]], unit: str = "us", scale: float = 1.0) -> None:
    print(f"{'':64s} {unit + '/call':>9s} {'min':>8s} {'max':>8s}")
    for name, s in samples.items():
        print(f"{name:64s} {statistics.median(s) * scale:9.2f} {min(s) * scale:8.2f} {max(s) * scale:8.2f}")


# ---- --cpu: flashsdpa's own host code, the launch mocked ------------------------------------------


class _NoLaunchBuild:
    """Answers like a CUDA build of _C on an H100-class GPU (one sm80 family, fp16 / bf16, head dims
    64 / 128 / 256); fwd and bwd do nothing."""

    def build_info(self) -> dict[str, Any]:
        return {"version": "cost", "with_cuda": True, "cuda_version": "13.0", "archs": [90],
                "dtypes": ["float16", "bfloat16"], "head_dims": [64, 128, 256], "kernel_families": ["sm80"],
                "max_head_dim": 256}  # fmt: skip

    def device_info(self, index: int) -> dict[str, Any]:
        return {"name": "no GPU", "major": 9, "minor": 0, "sms": 132, "smem_optin_bytes": 232448, "family": "sm80"}

    def head_dim_bucket(self, head_dim_qk: int, head_dim_v: int) -> int:
        return next((d for d in (64, 128, 256) if d >= max(head_dim_qk, head_dim_v)), 0)

    def capabilities(self) -> dict[str, Any]:
        family = {"family": "sm80", "runs_on": "compute capability 8.0 and newer", "min_capability": (8, 0),
                  "max_capability": None, "archs": [90], "dtypes": ["float16", "bfloat16"], "head_dims": [64, 128, 256],
                  "head_dim_rule": "multiples of 8", "masks": ["none", "causal_top_left", "causal_bottom_right", "window"],
                  "layouts": ["dense", "varlen"], "directions": ["forward", "backward"], "smem_per_tile": []}  # fmt: skip
        return {"families": [family], "reason": None}

    def select(self, device: int, dtype: int, head_dim_qk: int, head_dim_v: int, mask: int, varlen: bool,
               backward: bool) -> tuple[Any, ...]:  # fmt: skip
        return ("sm80", self.head_dim_bucket(head_dim_qk, head_dim_v), 0, 163840, None)

    def fwd_workspace_bytes(self, *args: Any) -> int:
        return 0  # (the sm80 family's forward needs none)

    def fwd(self, *args: Any) -> None:
        pass

    def bwd(self, *args: Any) -> None:
        pass


class _PassThroughMode(TorchFunctionMode):
    """What the TorchFunctionMode of earlier versions did with every call other than SDPA."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _entry_on(context: contextlib.AbstractContextManager[Any]) -> Iterator[None]:
    """The entry as while flashsdpa is active (without registering the routers), in ``context``."""
    saved = entry._active
    entry._active = True
    try:
        with context:
            yield
    finally:
        entry._active = saved


@contextlib.contextmanager
def _cuda_lookalike() -> Iterator[None]:
    saved = (_backend._C, _backend.IMPORT_ERROR, _backend._current_stream, Tensor.is_cuda)
    _backend._configure(_NoLaunchBuild())
    _backend._current_stream = lambda device: 0  # type: ignore[assignment]
    Tensor.is_cuda = property(lambda self: True)  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        Tensor.is_cuda = saved[3]  # type: ignore[method-assign]
        _backend._current_stream = saved[2]  # type: ignore[assignment]
        _backend._configure(saved[0], saved[1])


def _dispatcher_rows() -> list[Row]:
    """The dispatcher calling a Python kernel (what every router call pays before its body) against
    a C++ kernel and a plain Python call, on an op registered for this measurement."""
    lib = torch.library.Library("shimcost", "DEF")
    lib.define("py(Tensor q, Tensor k, Tensor v, float dropout_p=0., bool is_causal=False) -> Tensor")
    lib.impl("py", lambda keyset, q, k, v, dropout_p=0.0, is_causal=False: q, "CPU", with_keyset=True)
    _dispatcher_rows.lib = lib  # type: ignore[attr-defined]  # keep it registered
    q = torch.randn(1, 1, 16, 64, dtype=torch.bfloat16)
    op = torch.ops.shimcost.py.default

    def python_kernel(keyset: Any, q: Tensor, k: Tensor, v: Tensor, dropout_p: float = 0.0,
                      is_causal: bool = False) -> Tensor:  # fmt: skip
        return q

    none = contextlib.nullcontext
    return [
        ("dispatcher -> Python kernel (shimcost::py, no body)", lambda: op(q, q, q, 0.0, True), none),
        ("plain Python call of the same function", lambda: python_kernel(None, q, q, q, 0.0, True), none),
        ("dispatcher -> C++ kernel (aten::alias)", lambda: torch.ops.aten.alias.default(q), none),
    ]


def cpu_main(rounds: int, calls: int) -> None:
    with _cuda_lookalike():
        q, k, v = (torch.randn(1, 1, 16, 64, dtype=torch.bfloat16) for _ in range(3))
        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
        out, lse = torch.empty_like(q), torch.empty(1, 1, 16, dtype=torch.float32)
        rng = torch.empty(2, dtype=torch.uint64)
        x = torch.randn(4)
        bwd_args = (torch.empty_like(q), q, k, v, out, lse, None, None, 16, 16, 0.0, True, rng, rng)
        keyset = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
        sdpa_entry = entry.scaled_dot_product_attention
        no_grad, grad = torch.no_grad, torch.enable_grad
        rows: list[Row] = [
            ("entry, training call (decides, hands to SDPA: mocked no-op)", lambda: sdpa_entry(qg, kg, vg),
             lambda: _entry_on(grad())),
            ("entry, eager path (decides, allocates, marshals; launch no-op)", lambda: sdpa_entry(q, k, v),
             lambda: _entry_on(no_grad())),
            ("  _eager_skip_reason, training call", lambda: entry._eager_skip_reason(qg, kg, vg, 0.0, False), grad),
            ("  _eager_skip_reason, eager call", lambda: entry._eager_skip_reason(q, k, v, 0.0, False), no_grad),
            ("router fwd body (_sdpa_flash_forward, launch marshalled)",
             lambda: routers._sdpa_flash_forward(keyset, q, k, v, 0.0, True), no_grad),
            ("router bwd body (_sdpa_flash_backward, launch marshalled)",
             lambda: routers._sdpa_flash_backward(keyset, *bwd_args), no_grad),
            ("  selection.dense_ok", lambda: selection.dense_ok(q, k, v), no_grad),
            ("  torch.empty_like(q)", lambda: torch.empty_like(q), no_grad),
            ("  lse: q.new_empty(B, H, S, dtype=float32)", lambda: q.new_empty(1, 1, 16, dtype=torch.float32),
             no_grad),
            ("  routers._unused_outputs", lambda: routers._unused_outputs(q), no_grad),
            ("  _backend.launch_fwd (marshalling, _C.fwd no-op)",
             lambda: _backend.launch_fwd(q, k, v, out, lse, 0.125, masks.CAUSAL_BOTTOM_RIGHT), no_grad),
            ("  _backend.launch_bwd (workspace + marshalling, _C.bwd no-op)",
             lambda: _backend.launch_bwd(q, q, k, v, out, lse, q, k, v, 0.125, masks.CAUSAL_BOTTOM_RIGHT), no_grad),
            *_dispatcher_rows(),
            ("unrelated op (x + x), outside", lambda: x + x, contextlib.nullcontext),
            ("unrelated op (x + x), inside enable()", lambda: x + x, flashsdpa.enable),
            ("unrelated op (x + x), under a pass-through TorchFunctionMode (the old design)", lambda: x + x,
             _PassThroughMode),
        ]  # fmt: skip
        saved_sdpa = entry._TORCH_SDPA

        def reaches_router(*args: Any, **kwargs: Any) -> Tensor:  # PyTorch's SDPA, as far as the entry sees it
            routers.ROUTED[0] += 1
            return args[0]

        entry._TORCH_SDPA = reaches_router  # type: ignore[assignment]
        try:
            samples = _interleaved(rows, rounds, calls, lambda: None)
        finally:
            entry._TORCH_SDPA = saved_sdpa
    _print(samples)


# ---- the GPU table ---------------------------------------------------------------------------------


def _sync() -> None:
    torch.cuda.synchronize()


@contextlib.contextmanager
def _side(name: str) -> Iterator[None]:
    """'torch flash': PyTorch with only its flash backend; 'torch default': PyTorch's own choice;
    'torch cudnn': only cuDNN; 'flashsdpa': inside enable()."""
    if name == "flashsdpa":
        with flashsdpa.enable():
            yield
    elif name == "torch default":
        yield
    else:
        backend = {"torch flash": SDPBackend.FLASH_ATTENTION, "torch cudnn": SDPBackend.CUDNN_ATTENTION}[name]
        with sdpa_kernel(backend):
            yield


def _on(side: str, no_grad: bool = False) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """A row's context: the side (``_side``), under torch.no_grad() where asked."""
    if no_grad:
        return lambda: _nested(_side(side), torch.no_grad())
    return lambda: _side(side)


def _tiny_rows() -> list[Row]:
    q, k, v = (torch.randn(1, 1, 16, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    dout = torch.randn_like(q)
    op = torch.ops.aten._scaled_dot_product_flash_attention.default
    saved: dict[str, Tensor | None] = {"out": None}

    def forward_grad() -> None:
        saved["out"] = F.scaled_dot_product_attention(qg, kg, vg)

    def step() -> None:
        out = F.scaled_dot_product_attention(qg, kg, vg)
        torch.autograd.grad(out, (qg, kg, vg), dout)

    rows: list[Row] = []
    for side in ("torch flash", "flashsdpa"):
        rows += [
            (f"tiny fwd, no grad, F.sdpa [{side}]", lambda: F.scaled_dot_product_attention(q, k, v),
             _on(side, no_grad=True)),
            (f"tiny fwd, no grad, aten flash op, LSE written [{side}]", lambda: op(q, k, v), _on(side, no_grad=True)),
            (f"tiny fwd, grad [{side}]", forward_grad, _on(side)),
            (f"tiny fwd + bwd (training step) [{side}]", step, _on(side)),
        ]  # fmt: skip
    return rows


@contextlib.contextmanager
def _nested(*contexts: contextlib.AbstractContextManager[Any]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for c in contexts:
            stack.enter_context(c)
        yield


def _small_model(dtype: torch.dtype) -> tuple[torch.nn.Module, Callable[[], Tensor]]:
    batch, seq, hidden, layers, heads = 8, 128, 256, 4, 4
    try:
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(vocab_size=1024, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                             num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=seq,
                             attn_implementation="sdpa")  # fmt: skip
        model = LlamaForCausalLM(config).to("cuda", dtype)
        ids = torch.randint(0, 1024, (batch, seq), device="cuda")
        return model, lambda: model(input_ids=ids, labels=ids).loss
    except ImportError:
        layer = torch.nn.TransformerDecoderLayer(hidden, heads, 4 * hidden, dropout=0.0, batch_first=True)
        model = torch.nn.TransformerDecoder(layer, layers).to("cuda", dtype)
        x = torch.randn(batch, seq, hidden, device="cuda", dtype=dtype)
        mask = torch.nn.Transformer.generate_square_subsequent_mask(seq, device=torch.device("cuda"))
        return model, lambda: model(x, x, tgt_mask=mask, tgt_is_causal=True).float().square().mean()


def _model_rows() -> list[Row]:
    rows: list[Row] = []
    for dtype in (torch.float32, torch.bfloat16):
        model, loss_fn = _small_model(dtype)
        opt = torch.optim.SGD(model.parameters(), lr=1e-4)

        def step(loss_fn: Callable[[], Tensor] = loss_fn, opt: Any = opt) -> None:
            loss_fn().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        name = str(dtype).removeprefix("torch.")
        for side in ("torch default", "torch flash", "flashsdpa"):
            if side == "torch flash" and dtype == torch.float32:
                continue  # flash takes no float32
            rows.append((f"model step {name} [{side}]", step, _on(side)))
    return rows


def _attention_rows() -> list[Row]:
    q, k, v = (torch.randn(8, 256, 16, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
               for _ in range(3))  # fmt: skip
    dout = torch.randn_like(q)

    def step() -> None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.autograd.grad(out, (q, k, v), dout)

    return [(f"attention B8 H16 S256 D64 causal fwd+bwd [{side}]", step, _on(side))
            for side in ("torch flash", "torch cudnn", "torch default", "flashsdpa")]  # fmt: skip


def _decode_rows() -> list[Row]:
    """One generated token's attention call as Hugging Face's Llama makes it inside a decode step
    (B 1, 32 query heads on 8 KV heads, one query row, 4k cached keys, D 128, no grad, SDPA with
    enable_gqa): issue 11's generation rows are host-bound (~6 ms a token for 8 layers), so what a
    decode call costs the host is what they feel of it. Our path launches two kernels (the split
    decode kernel and the combine) and allocates the split workspace."""
    q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 8, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))

    def call() -> None:
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    return [(f"decode call B1 H32/8 Sk 4k D128 [{side}]", call, _on(side, no_grad=True))
            for side in ("torch flash", "torch cudnn", "torch default", "flashsdpa")]  # fmt: skip


def _host_and_kernel_us(rows: list[Row], steps: int = 20) -> dict[str, tuple[float, float]]:
    """Per row: host microseconds to issue one step (no synchronization inside the timed loop: the
    GPU runs behind) and the GPU's microseconds per step: the step captured in a CUDA graph and
    replayed (flashsdpa.bench.timing.graph_us). Until session 37 this summed torch.profiler's kernel
    times, which overstates a step whose kernels overlap: our dQ postprocess is launched
    programmatically and its "duration" includes its wait for the main backward (B 8 x H 16 x S 256
    causal, H100: profiler 59.8 us, graph 49.0)."""
    result = {}
    for name, fn, context in rows:
        with context():
            for _ in range(5):
                fn()
            _sync()
            start = time.perf_counter()
            for _ in range(steps):
                fn()
            host = (time.perf_counter() - start) / steps * 1e6
            _sync()
            kernel = graph_us([fn], per_graph=steps, replays=5)
        result[name] = (host, kernel)
    return result


def gpu_main(rounds: int, calls: int) -> None:
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, flashsdpa {flashsdpa.__version__}")
    # Which routers stand behind SDPA's flash ops: the C++ ones, or the Python ones and why
    # (FLASHSDPA_ROUTERS=python measures those on a machine that has both).
    print("routers:", collect_info()["routers"])
    tiny = _interleaved(_tiny_rows(), rounds, calls, _sync)
    _print(tiny)
    for label, theirs, ours in (
        ("fwd no grad (F.sdpa; not equal work: ours skips the LSE)", "tiny fwd, no grad, F.sdpa [torch flash]",
         "tiny fwd, no grad, F.sdpa [flashsdpa]"),
        ("fwd no grad, equal work (aten op, LSE written)", "tiny fwd, no grad, aten flash op, LSE written [torch flash]",
         "tiny fwd, no grad, aten flash op, LSE written [flashsdpa]"),
        ("fwd with grad", "tiny fwd, grad [torch flash]", "tiny fwd, grad [flashsdpa]"),
        ("training step (fwd + bwd): the headline", "tiny fwd + bwd (training step) [torch flash]",
         "tiny fwd + bwd (training step) [flashsdpa]"),
    ):  # fmt: skip
        print(f"overhead {label}: {statistics.median(tiny[ours]) - statistics.median(tiny[theirs]):+.2f} us")
    bwd = {s: statistics.median(tiny[f"tiny fwd + bwd (training step) [{s}]"])
           - statistics.median(tiny[f"tiny fwd, grad [{s}]"]) for s in ("torch flash", "flashsdpa")}  # fmt: skip
    print(f"overhead backward alone (step - fwd): {bwd['flashsdpa'] - bwd['torch flash']:+.2f} us")
    print()
    models = _interleaved(_model_rows(), max(rounds // 3, 5), 10, _sync)
    _print(models, "ms", 1e-3)
    print()
    attention = _attention_rows()
    attention_us = _interleaved(attention, rounds, 50, _sync)
    _print(attention_us)
    split = _host_and_kernel_us(attention)
    print(f"\n{'attention step: host to issue / kernel time':64s} {'host us':>9s} {'kernel us':>9s}")
    for name, (host, kernel) in split.items():
        print(f"{name:64s} {host:9.1f} {kernel:9.1f}")
    decode = _host_and_kernel_us(_decode_rows(), steps=200)
    print(f"\n{'decode call (issue 11): host to issue / GPU time':64s} {'host us':>9s} {'kernel us':>9s}")
    for name, (host, kernel) in decode.items():
        print(f"{name:64s} {host:9.1f} {kernel:9.1f}")
    _bars(tiny, bwd, models, attention_us, split)
    print("\nflashsdpa.stats() ops with calls:",
          {op: c for op, c in flashsdpa.stats()["ops"].items() if c["served"] or c["fallback"]})  # fmt: skip


def _bars(tiny: dict[str, list[float]], bwd: dict[str, float], models: dict[str, list[float]],
          attention: dict[str, list[float]], split: dict[str, tuple[float, float]]) -> None:  # fmt: skip
    """Issue 9's bars, one line each, last: the value measured, the bar and whether it is met."""
    med = {name: statistics.median(s) for table in (tiny, models, attention) for name, s in table.items()}

    def over(row: str) -> float:
        return med[f"{row} [flashsdpa]"] - med[f"{row} [torch flash]"]

    att = "attention B8 H16 S256 D64 causal fwd+bwd"
    rows = [
        ("tiny fwd, no grad, equal work (LSE written): ours - flash", over("tiny fwd, no grad, aten flash op, LSE written"),
         "us", 0.0),
        ("tiny fwd with grad: ours - flash", over("tiny fwd, grad"), "us", 2.0),
        ("tiny backward: ours - flash", bwd["flashsdpa"] - bwd["torch flash"], "us", 2.0),
        ("tiny training step (headline): ours - flash", over("tiny fwd + bwd (training step)"), "us", None),
        ("model step fp32: inside / outside - 1", med["model step float32 [flashsdpa]"]
         / med["model step float32 [torch default]"] - 1, "", 0.02),
        ("model step bf16: inside - FA2 only", (med["model step bfloat16 [flashsdpa]"]
         - med["model step bfloat16 [torch flash]"]) * 1e-3, "ms", 0.0),
        ("model step bf16: inside - default", (med["model step bfloat16 [flashsdpa]"]
         - med["model step bfloat16 [torch default]"]) * 1e-3, "ms", 0.0),
        ("attention step: ours - FA2", med[f"{att} [flashsdpa]"] - med[f"{att} [torch flash]"], "us", 0.0),
        ("attention step: ours - cuDNN, host part", split[f"{att} [flashsdpa]"][0] - split[f"{att} [torch cudnn]"][0],
         "us", None),
        ("attention step: ours - cuDNN, kernel part", split[f"{att} [flashsdpa]"][1] - split[f"{att} [torch cudnn]"][1],
         "us", None),
    ]  # fmt: skip
    print(f"\n{'issue 9 bar':64s} {'value':>10s} {'bar':>8s}  verdict")
    for name, value, unit, bar in rows:
        shown = f"{value * 100:+.2f}%" if unit == "" else f"{value:+.2f}{unit}"
        limit = "" if bar is None else (f"<= {bar * 100:g}%" if unit == "" else f"<= {bar:g}")
        verdict = "" if bar is None else ("met" if value <= bar else "NOT MET")
        print(f"{name:64s} {shown:>10s} {limit:>8s}  {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="flashsdpa's Python alone, launches mocked")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (on a loaded CPU, read the min)")
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per row and round")
    args = parser.parse_args()
    if args.cpu:
        cpu_main(args.rounds, args.calls)
    else:
        gpu_main(args.rounds, args.calls)


if __name__ == "__main__":
    main()
