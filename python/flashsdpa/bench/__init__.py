# bench/: `python -m flashsdpa bench`, flashsdpa's kernels against PyTorch's SDPA backends, in one
# process, on the standard sweep in interleaved rounds; plus peak extra memory at S = 16k, the
# shim's per-call overhead, a correctness spot check of every timed configuration, the model rows
# (models.py), the decode rows (decode.py) and the bars (bars.py), printed last. Without a CUDA GPU
# it runs a self-check of the shim on the CPU reference path instead.
"""Benchmark flashsdpa against PyTorch's SDPA backends.

The standard sweep (FlashAttention's): B * S = 16k tokens, H * D = 2048, D in {64, 128, 256},
S in {512, 1k, 2k, 4k, 8k, 16k}, causal and not, forward and backward, bf16. Backends, side by side:

  flashsdpa        flashsdpa.attention (the direct API)
  flashsdpa-sdpa   F.scaled_dot_product_attention inside flashsdpa.enable() (the shim's path)
  torch-flash      PyTorch's flash backend   (sdpa_kernel(FLASH_ATTENTION))
  torch-cudnn      PyTorch's cuDNN backend   (sdpa_kernel(CUDNN_ATTENTION))
  torch-efficient  PyTorch's efficient backend (sdpa_kernel(EFFICIENT_ATTENTION))
  torch-default    PyTorch's own choice (no sdpa_kernel)
  fa4              FlashAttention-4 (flash_attn.cute) where it imports; elsewhere its anchor values
                   stand in, in a column labelled "fa4 anc." (never as a measurement)

FLOPs as FlashAttention counts them: forward 4 * B * H * Sq * Sk * D, halved when causal;
backward 2.5 x forward. Each of --rounds interleaved rounds (default 3; --quick 1) times every
backend of every configuration once, by CUDA-event medians after warm-up; a row reports the median
round's time and the medians of the per-round ratios ours / cuDNN, / flash, / best of PyTorch, /
best of cuDNN and FA4. Every timed configuration is spot-checked (round 0) against a float32
reference on one (batch, head) slice, with the project's rule (error <= 2 x that of PyTorch's math
SDPA in the input dtype + 1e-5), so a fast but wrong kernel is marked WRONG instead of winning.

Parts: the sweep (with the overhead and memory reports), --models (a Hugging Face Llama-style
decoder: prefill, train step, generation, and the small model, inside enable() and out) and
--decode (one query token against a KV cache: µs, TB/s, host µs, graph µs), --window (a causal
4k window on 32k tokens against dense causal, rates on visible pairs), --masks (key padding and
an additive bias through SDPA, ours against PyTorch's masked backends), --deterministic (our
backward under torch.use_deterministic_algorithms(True) against the default mode, bitwise
repeatability checked) and --features (dropout 0.1 through SDPA against PyTorch's backends that
take it, softcap 50 against no softcap). Naming parts runs only those; naming none runs all seven (the full run,
about 8-10 minutes on an H200) or, with --quick,
the quick sweep alone (about a minute). The bars table comes last: value, target, PASS/FAIL.

Writes results.csv, models.csv, decode.csv, bars.csv, results.json and tflops.png (if matplotlib
is installed) to --out.
Exit codes: 0 ran and every check of ours passed; 1 one of our kernels failed its correctness check,
raised, or a row did not run the backend it is labelled with (or the CPU self-check failed);
2 bad arguments; 3 a CUDA GPU is present but flashsdpa's kernels cannot run on it (only PyTorch's
backends were measured); 4 a part of the benchmark raised (its traceback printed; the other parts
ran). Bars never change the exit code.
"""

from __future__ import annotations

import argparse
import sys

import torch

from flashsdpa.bench.gpu import run_gpu
from flashsdpa.bench.problems import (
    BACKENDS,
    DEFAULT_ROUNDS,
    EXIT_USAGE,
    QUICK_ROUNDS,
    QUICK_HEAD_DIMS,
    QUICK_SEQLENS,
    STANDARD_HEAD_DIMS,
    STANDARD_SEQLENS,
    parse_count,
)
from flashsdpa.bench.selfcheck import self_check

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--head-dims",
        type=parse_count,
        nargs="+",
        default=None,
        metavar="D",
        help=f"head dims (default {' '.join(map(str, STANDARD_HEAD_DIMS))})",
    )
    parser.add_argument(
        "--seqlens",
        type=parse_count,
        nargs="+",
        default=None,
        metavar="S",
        help="sequence lengths, k suffix allowed (default 512 1k 2k 4k 8k 16k)",
    )
    parser.add_argument("--causal", choices=("both", "true", "false"), default="both")
    parser.add_argument("--direction", choices=("fwd", "bwd", "both"), default="both")
    parser.add_argument(
        "--backends",
        nargs="+",
        choices=BACKENDS,
        default=list(BACKENDS),
        metavar="NAME",
        help=f"subset of: {' '.join(BACKENDS)}",
    )
    parser.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    parser.add_argument("--tokens", type=parse_count, default=16384, help="B * S (default 16k)")
    parser.add_argument("--hidden", type=parse_count, default=2048, help="H * D (default 2048)")
    parser.add_argument(
        "--layout",
        choices=("bshd", "bhsd"),
        default="bshd",
        help="memory order behind the (B, H, S, D) views (default bshd, as models pass them)",
    )
    parser.add_argument("--reps", type=int, default=None, help="timed calls per measurement (default 20; quick 10)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", default="bench_results", help="directory for results.csv/json and tflops.png")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"about a minute: D {' '.join(map(str, QUICK_HEAD_DIMS))}, S "
        f"{' '.join(map(str, QUICK_SEQLENS))} (explicit --head-dims/--seqlens win)",
    )
    parser.add_argument("--no-check", action="store_true", help="skip the correctness spot checks")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory report")
    parser.add_argument("--no-overhead", action="store_true", help="skip the per-call overhead report")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help=f"interleaved rounds; ratio bars are judged on their median (default {DEFAULT_ROUNDS}; quick {QUICK_ROUNDS})",
    )
    parser.add_argument("--sweep", action="store_true", help="run the sweep part (with overhead and memory)")
    parser.add_argument("--models", action="store_true", help="run the model rows (HF Llama-style decoder)")
    parser.add_argument("--decode", action="store_true", help="run the decode rows (µs, TB/s)")
    parser.add_argument("--window", action="store_true", help="run the sliding-window row (4k window on 32k tokens)")
    parser.add_argument("--masks", action="store_true", help="run the attn_mask rows (key padding, additive bias)")
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="run the deterministic-mode rows (our backward under use_deterministic_algorithms / default)",
    )
    parser.add_argument(
        "--features", action="store_true", help="run issue 14's feature rows (dropout 0.1 S 4k, softcap 50 S 8k)"
    )
    parser.add_argument(
        "--model-impl",
        choices=("auto", "hf", "torch"),
        default="auto",
        help="model rows: Hugging Face's Llama (hf), the plain-torch decoder (torch), or hf where it imports",
    )
    parser.add_argument(
        "--model-cases",
        nargs="+",
        default=None,
        metavar="TEXT",
        help="model rows: only the cases whose name contains one of these (e.g. 'small train bf16'), for more rounds of one row",
    )
    parser.add_argument("--anchors", default=None, metavar="JSON", help="FA4 anchor file (default: anchors.py)")


def run(args: argparse.Namespace) -> int:
    if args.head_dims is None:
        args.head_dims = list(QUICK_HEAD_DIMS if args.quick else STANDARD_HEAD_DIMS)
    if args.seqlens is None:
        args.seqlens = list(QUICK_SEQLENS if args.quick else STANDARD_SEQLENS)
    if args.reps is None:
        args.reps = 10 if args.quick else 20
    if args.rounds is None:
        args.rounds = QUICK_ROUNDS if args.quick else DEFAULT_ROUNDS
    if args.rounds < 1:
        print("bench: --rounds must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    if args.reps < 1 or args.warmup < 0 or any(s < 1 for s in args.seqlens) or any(d < 1 for d in args.head_dims):
        print("bench: --reps, --seqlens and --head-dims must be positive", file=sys.stderr)
        return EXIT_USAGE
    if not torch.cuda.is_available():
        print(
            f"No CUDA GPU on this machine (torch {torch.__version__}, "
            f"{'CUDA ' + torch.version.cuda if torch.version.cuda else 'a CPU-only build'}): nothing to benchmark."
        )
        print(
            "Running the self-check of the shim on the reference path instead: flashsdpa.attention on CPU "
            "(the blockwise PyTorch reference) against PyTorch's math SDPA, forward and backward.\n"
        )
        return self_check()
    return run_gpu(args)
