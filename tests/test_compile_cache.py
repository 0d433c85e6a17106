# test_compile_cache.py: torch.compile's on-disk caches key on flashsdpa's activation (issue 10,
# item 10). Inductor's FX-graph cache and AOTAutograd's cache hash the traced graph, not SDPA's
# backend choice; while active, flashsdpa adds its tag to torch.compiler.config.cache_key_tag,
# which both hash into every key. Three processes share one cache directory: a graph compiled
# inside enable() is not loaded outside it, and is loaded inside again. CPU only (Inductor's C++
# backend).
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import flashsdpa
from flashsdpa import activation

_COMPILE = """
import json, sys, torch, torch.nn.functional as F, flashsdpa
from torch._dynamo.utils import counters

def attend(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).relu() * 2

q = torch.randn(1, 2, 8, 16)
with flashsdpa.enable() if sys.argv[1] == "inside" else torch.no_grad():
    torch.compile(attend, backend="inductor")(q, q, q)
print(json.dumps({"fx_hit": counters["inductor"]["fxgraph_cache_hit"],
                  "fx_miss": counters["inductor"]["fxgraph_cache_miss"],
                  "aot_hit": counters["aot_autograd"]["autograd_cache_hit"]}))
"""


def _compile_in_process(side: str, cache_dir: Path) -> dict[str, int]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "TORCHINDUCTOR_CACHE_DIR": str(cache_dir),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
    }
    env.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)
    result = subprocess.run(
        [sys.executable, "-c", _COMPILE, side], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_caches_key_on_activation(tmp_path: Path) -> None:
    inside = _compile_in_process("inside", tmp_path)
    assert inside["fx_miss"] == 1 and inside["fx_hit"] == 0  # a fresh cache
    outside = _compile_in_process("outside", tmp_path)
    assert outside["fx_hit"] == 0 and outside["aot_hit"] == 0, outside  # not the graph traced inside
    again = _compile_in_process("inside", tmp_path)
    assert again["fx_hit"] + again["aot_hit"] >= 1, again  # the graph traced inside, from disk


def test_cache_tag_set_and_restored() -> None:
    config = torch.compiler.config
    if not hasattr(config, "cache_key_tag"):
        pytest.skip("this torch has no torch.compiler.config.cache_key_tag")
    saved = config.cache_key_tag
    try:
        config.cache_key_tag = "user"
        with flashsdpa.enable():
            assert config.cache_key_tag == f"user+{activation.CACHE_TAG}"
            with flashsdpa.enable():
                assert config.cache_key_tag == f"user+{activation.CACHE_TAG}"
        assert config.cache_key_tag == "user"
    finally:
        config.cache_key_tag = saved
