# info.py: what was built and what this machine has, as one dict.
#
# `python -m flashsdpa info` prints it and the benchmark stores it with its results; both read it
# from here, so that neither command line imports the other.
"""Build, torch, Python and GPU facts, as ``python -m flashsdpa info`` reports them."""

from __future__ import annotations

import platform
from typing import Any

import torch

__all__ = ["collect_info"]


def _torch_info() -> dict[str, Any]:
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    registry = None
    attention = torch.nn.attention
    if hasattr(attention, "list_flash_attention_impls"):
        registry = {
            "impls": list(attention.list_flash_attention_impls()),
            "active": attention.current_flash_attention_impl(),
        }
    return {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "cuda_available": torch.cuda.is_available(),
        "flash_attention_registry": registry,
    }


def _gpu_info() -> list[dict[str, Any]]:
    from flashsdpa import _backend

    gpus = []
    for index in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        props = torch.cuda.get_device_properties(index)
        gpu: dict[str, Any] = {
            "index": index,
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "sms": props.multi_processor_count,
            "memory_gib": round(props.total_memory / 2**30, 1),
        }
        reason = _backend.device_reason(index)  # never raises: a driver _C cannot use is a reason
        if _backend.CUDA_KERNELS and _backend.device_ok(index):
            gpu["kernel_family"] = _backend.device_info(index)["family"]
            gpu["smem_optin_bytes"] = _backend.device_info(index)["smem_optin_bytes"]
        gpu["served"] = reason is None
        gpu["not_served_because"] = reason
        gpus.append(gpu)
    return gpus


def _no_gpu_reason() -> str | None:
    """Why no GPU is usable here (None when torch sees one): what torch says, and what _C's CUDA
    runtime says (a machine with nvcc and no driver builds kernels it cannot run)."""
    from flashsdpa import _backend

    if torch.cuda.is_available():
        return None
    cpu_torch = "" if torch.version.cuda else f" (torch {torch.__version__} is a CPU build)"
    parts = [f"torch.cuda.is_available() is False{cpu_torch}"]
    if _backend.CUDA_KERNELS:
        reason = _backend.device_reason(0)
        if reason is not None and reason.startswith("no usable GPU"):
            parts.append(f"flashsdpa._C: {reason.split(': ', 1)[1]}")
    return "no usable GPU: " + "; ".join(parts)


def collect_info() -> dict[str, Any]:
    """Everything ``info`` prints, as one dict (bench stores it with its results)."""
    import flashsdpa

    build = flashsdpa.build_info()
    return {
        "flashsdpa": getattr(flashsdpa, "__version__", build.get("version")),
        "build": build,
        "active": flashsdpa.is_active(),
        "torch": _torch_info(),
        "python": platform.python_version(),
        "gpus": _gpu_info(),
        "no_gpu_reason": _no_gpu_reason(),
        "capabilities": list(flashsdpa.capabilities()),
        "capabilities_reason": flashsdpa.capabilities().reason,
        "routers": _routers_info(),
    }


def _routers_info() -> dict[str, Any]:
    """Which routers stand at the CUDA key of SDPA's flash ops and of its efficient-attention ops:
    the C++ ones (libflashsdpa_routers) or, with the reason, the Python ones."""
    from flashsdpa import cxx_routers

    reason = cxx_routers.unavailable_reason()
    masked = cxx_routers.masked_unavailable_reason()
    return {"sdpa_flash": "python" if reason else "c++", "python_because": reason,
            "sdpa_efficient": "python" if masked else "c++", "efficient_python_because": masked}  # fmt: skip
