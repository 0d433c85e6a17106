# cli.py: the command line, `python -m flashsdpa {info,explain,bench}`.
#
# info: what was built and what this machine has (info.py); explain: whether one SDPA call (a
# shape given as flags) would run our kernels, and if not, why; bench: the bench package. Exit
# codes are for scripts:
#   info     0 the compiled module loads, 1 it does not (no usable GPU is reported, not an error)
#   explain  0 served by flashsdpa, 1 would fall back (reasons printed), 2 bad arguments; without a
#            usable GPU (no driver) the verdict is for a GPU the build serves, and the reason is printed
#   bench    see bench/__init__.py (0 ran and every correctness check passed)
"""Command line of flashsdpa: ``python -m flashsdpa info | explain | bench``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import torch

from flashsdpa import bench
from flashsdpa.bench.problems import DTYPES, parse_count
from flashsdpa.info import collect_info

EXIT_OK = 0
EXIT_NOT_SERVED = 1
EXIT_USAGE = 2


# ---- info -----------------------------------------------------------------------------------------


def _print_capabilities(families: list[dict[str, Any]], reason: str | None) -> None:
    """The capability table of the compiled kernel families, one block per family."""
    if not families:
        print(f"{'kernel families':<24} none: {reason}")
        return
    for f in families:
        print(f"{'kernel family ' + f['family']:<24} runs on {f['runs_on']}")
        print(f"{'  dtypes':<24} {', '.join(f['dtypes'])}")
        print(f"{'  head dims':<24} {', '.join(map(str, f['head_dims']))} ({f['head_dim_rule']})")
        for direction, dims in f["head_dims_by_direction"].items():
            print(f"{f'  head dims {direction}':<24} {', '.join(map(str, dims)) or 'none compiled'}")
        print(f"{'  masks':<24} {', '.join(f['masks'])}")
        print(f"{'  layouts, directions':<24} {', '.join(f['layouts'])}; {', '.join(f['directions'])}")
        for direction, names in f.get("features_by_direction", {}).items():
            print(f"{f'  modifiers {direction}':<24} {', '.join(names) or 'none'}")
        tiles: dict[tuple[str, int], list[str]] = {}
        for t in f["smem_per_tile"]:
            tiles.setdefault((t["direction"], t["cc_major"]), []).append(f"{t['head_dim']}:{t['bytes'] // 1024}K")
        for (direction, major), items in tiles.items():
            print(f"{f'  smem {direction} sm_{major}x':<24} {' '.join(items)}")


def _print_info(info: dict[str, Any]) -> None:
    build, tinfo = info["build"], info["torch"]

    def row(key: str, value: object) -> None:
        print(f"{key:<24} {value}")

    row("flashsdpa", info["flashsdpa"])
    if build.get("import_error"):
        row("compiled module", f"NOT LOADED: {build['import_error']}")
    else:
        row("compiled module", "with CUDA kernels" if build["with_cuda"] else "CPU-only (built without nvcc)")
    if build["with_cuda"]:
        row("  CUDA (build)", build["cuda_version"])
        row("  archs", ", ".join(f"sm_{a}" for a in build["archs"]))
        row("  dtypes", ", ".join(build["dtypes"]))
        row("  head dims", ", ".join(map(str, build["head_dims"])) + f" (max {build['max_head_dim']})")
        row("  kernel families", ", ".join(build["kernel_families"]))
    _print_capabilities(info["capabilities"], info["capabilities_reason"])
    row("active", "yes" if info["active"] else "no (enter flashsdpa.enable() or call flashsdpa.install())")
    routers = info["routers"]
    row("SDPA flash routers", "C++ (libflashsdpa_routers)" if routers["sdpa_flash"] == "c++"
        else f"Python: {routers['python_because']}")  # fmt: skip
    row("SDPA efficient routers", "C++ front, Python for masked half-precision calls"
        if routers["sdpa_efficient"] == "c++" else f"Python: {routers['efficient_python_because']}")  # fmt: skip
    row("torch", tinfo["version"])
    row("  CUDA (torch)", tinfo["cuda"] or "none (CPU build)")
    row("  cuDNN", tinfo["cudnn"] if tinfo["cudnn"] is not None else "none")
    row("  CUDA available", tinfo["cuda_available"])
    if tinfo["flash_attention_registry"] is not None:
        reg = tinfo["flash_attention_registry"]
        row("  flash impl registry", f"{', '.join(reg['impls']) or 'empty'} (active: {reg['active']})")
    row("python", info["python"])
    if not info["gpus"]:
        row("GPUs", f"none: {info['no_gpu_reason']}")
    for gpu in info["gpus"]:
        served = "served by flashsdpa" if gpu["served"] else f"not served: {gpu['not_served_because']}"
        row(
            f"GPU {gpu['index']}",
            f"{gpu['name']}, sm_{gpu['capability'].replace('.', '')}, {gpu['sms']} SMs, {gpu['memory_gib']} GiB",
        )
        if "kernel_family" in gpu:
            row("  kernel family", f"{gpu['kernel_family']} (opt-in smem {gpu['smem_optin_bytes']} B)")
        row("  status", served)


def _cmd_info(args: argparse.Namespace) -> int:
    info = collect_info()
    if args.json:
        print(json.dumps(info, indent=1, default=str))
    else:
        _print_info(info)
    return EXIT_OK if info["build"].get("import_error") is None else 1


# ---- explain --------------------------------------------------------------------------------------

_MASKS = ("none", "bool", "float", "lower-right", "upper-left")


def _explain_call(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """The SDPA arguments for the shape on the command line, and a one-line description.

    Tensors are fake (torch's FakeTensorMode): they carry shape, strides, dtype and device but no
    memory, so any shape can be asked about (a million tokens, batch x heads beyond 65,535), and a
    CUDA shape even on a machine without a GPU.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.nn.attention.bias import causal_lower_right, causal_upper_left

    b, hq, hkv, sq, sk = args.batch, args.heads_q, args.heads_kv, args.seqlen_q, args.seqlen_k
    d = args.head_dim
    dv = args.head_dim_v if args.head_dim_v is not None else d
    dtype = DTYPES[args.dtype]
    with FakeTensorMode(allow_non_fake_inputs=True):

        def make(heads: int, seqlen: int, dim: int) -> torch.Tensor:
            if args.layout == "bshd":
                return torch.empty(b, seqlen, heads, dim, dtype=dtype, device=args.device).transpose(1, 2)
            return torch.empty(b, heads, seqlen, dim, dtype=dtype, device=args.device)

        query, key, value = make(hq, sq, d), make(hkv, sk, d), make(hkv, sk, dv)
        attn_mask: object = None
        if args.mask == "bool":
            attn_mask = torch.empty(b, 1, sq, sk, dtype=torch.bool, device=args.device)
        elif args.mask == "float":
            attn_mask = torch.empty(b, 1, sq, sk, dtype=dtype, device=args.device)
    if args.mask == "lower-right":
        attn_mask = causal_lower_right(sq, sk)
    elif args.mask == "upper-left":
        attn_mask = causal_upper_left(sq, sk)
    call = {
        "query": query,
        "key": key,
        "value": value,
        "attn_mask": attn_mask,
        "dropout_p": args.dropout,
        "is_causal": args.causal,
        "scale": args.scale,
        "enable_gqa": hq != hkv,
    }
    text = (
        f"SDPA q ({b}, {hq}, {sq}, {d}) k ({b}, {hkv}, {sk}, {d}) v ({b}, {hkv}, {sk}, {dv}) {args.dtype} "
        f"on {args.device} [{args.layout}], mask={args.mask}, is_causal={args.causal}, dropout_p={args.dropout}, "
        f"scale={args.scale}, enable_gqa={hq != hkv}"
    )
    return call, text


def _no_usable_gpu(device: torch.device) -> str | None:
    """Why a CUDA call cannot run on this machine at all (no GPU, no driver), or None."""
    from flashsdpa import _backend

    if device.type != "cuda" or not _backend.CUDA_KERNELS:
        return None
    index = device.index or 0
    reason = _backend.device_reason(index)
    return reason if reason is not None and reason.startswith("no usable GPU") else None


def _cmd_explain(args: argparse.Namespace) -> int:
    import flashsdpa

    call, text = _explain_call(args)
    reasons = flashsdpa.explain(**call)
    print(text)
    no_gpu = _no_usable_gpu(call["query"].device)
    if no_gpu is not None:
        # A machine with nvcc and no driver (the README's CPU setup): the verdict is about the
        # call and this build, on a GPU the build serves; the missing GPU is reported, not judged.
        print(f"{no_gpu}; the verdict below is for a GPU this build serves")
        reasons = [r for r in reasons if r != no_gpu]
    if not reasons:
        print("served by flashsdpa")
        return EXIT_OK
    print("falls back to PyTorch:")
    for reason in reasons:
        print(f"  - {reason}")
    return EXIT_NOT_SERVED


# ---- parser ---------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from flashsdpa import __version__

    parser = argparse.ArgumentParser(prog="python -m flashsdpa", description=__doc__)
    parser.add_argument("--version", action="version", version=f"flashsdpa {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{info,explain,bench}")

    info = sub.add_parser("info", help="build, torch, CUDA, cuDNN and GPU facts; whether flashsdpa is active")
    info.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    info.set_defaults(func=_cmd_info)

    ex = sub.add_parser(
        "explain",
        help="would this SDPA call run flashsdpa's kernels? (exit 0 yes, 1 no)",
        description="Describe one scaled_dot_product_attention call by its shape and print why flashsdpa "
        "would not serve it, or 'served by flashsdpa'. Lengths accept k/M suffixes (8k = 8192).",
    )
    ex.add_argument("--batch", type=parse_count, default=1)
    ex.add_argument("--heads-q", type=parse_count, default=16)
    ex.add_argument("--heads-kv", type=parse_count, default=None, help="default: --heads-q")
    ex.add_argument("--seqlen-q", type=parse_count, default=4096)
    ex.add_argument("--seqlen-k", type=parse_count, default=None, help="default: --seqlen-q")
    ex.add_argument("--head-dim", type=parse_count, default=128)
    ex.add_argument("--head-dim-v", type=parse_count, default=None, help="default: --head-dim")
    ex.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ex.add_argument("--causal", action="store_true", help="is_causal=True")
    ex.add_argument("--dropout", type=float, default=0.0, metavar="P")
    ex.add_argument(
        "--mask", choices=_MASKS, default="none", help="attn_mask kind (lower-right/upper-left: CausalBias)"
    )
    ex.add_argument("--scale", type=float, default=None)
    ex.add_argument(
        "--layout",
        choices=("bhsd", "bshd"),
        default="bshd",
        help="memory order behind the (B, H, S, D) views (bshd: transposed, as models pass them)",
    )
    ex.add_argument("--device", default="cuda", help="device of the tensors (default cuda)")
    ex.set_defaults(func=_cmd_explain)

    bn = sub.add_parser(
        "bench",
        help="TFLOP/s of flashsdpa against PyTorch's SDPA backends (see --help)",
        description=bench.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_arguments(bn)
    bn.set_defaults(func=bench.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "explain":
        if args.heads_kv is None:
            args.heads_kv = args.heads_q
        if args.seqlen_k is None:
            args.seqlen_k = args.seqlen_q
        if args.heads_kv <= 0 or args.heads_q % args.heads_kv:
            parser.error(f"--heads-q ({args.heads_q}) must be a positive multiple of --heads-kv ({args.heads_kv})")
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `python -m flashsdpa info --json | head`: the reader left; end quietly, as Unix tools do.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - replaces the closed stream for the exit flush
        return 141
