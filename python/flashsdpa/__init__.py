# __init__.py: the public API of flashsdpa; each name lives in the module that owns it.
"""flashsdpa: exact FlashAttention CUDA kernels behind torch.nn.functional.scaled_dot_product_attention.

    with flashsdpa.enable():          # or flashsdpa.install(), or
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.nn.attention.activate_flash_attention_impl("FLASHSDPA")

    flashsdpa.explain(q, k, v, dropout_p=0.1)   # why a call would fall back to PyTorch's kernel
    flashsdpa.attention(q, k, v, causal=True)   # the direct API (differentiable, compilable)

Importing the package registers "FLASHSDPA" with torch.nn.attention's registry but never
activates anything: PyTorch behaves exactly as before until you opt in.
"""

from __future__ import annotations

from flashsdpa import reference
from flashsdpa._backend import build_info, capabilities
from flashsdpa.direct import attention, attention_varlen
from flashsdpa import ops_mods  # noqa: F401  (registers flashsdpa::fwd_mods / bwd_mods)
from flashsdpa import ops_masks  # noqa: F401  (registers flashsdpa::fwd_masked / bwd_masked)
from flashsdpa import ops_dropout  # noqa: F401  (registers flashsdpa::fwd_dropout / bwd_dropout)
from flashsdpa import routers_masked  # noqa: F401  (the masked SDPA ops' routes join routers.py's table)
from flashsdpa.kvcache import attention_with_kvcache
from flashsdpa.activation import REGISTRY_NAME, enable, install, is_active, uninstall
from flashsdpa.reporting import FallbackWarning, reset_stats, set_fallback_warnings, stats
from flashsdpa.selection import explain

__version__ = "0.1.0"

__all__ = [
    "REGISTRY_NAME",
    "FallbackWarning",
    "__version__",
    "attention",
    "attention_varlen",
    "attention_with_kvcache",
    "build_info",
    "capabilities",
    "enable",
    "explain",
    "install",
    "is_active",
    "reference",
    "reset_stats",
    "set_fallback_warnings",
    "stats",
    "uninstall",
]
