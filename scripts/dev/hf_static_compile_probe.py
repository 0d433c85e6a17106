# hf_static_compile_probe.py: issue 10, item 9, with the model of the report. A Hugging Face
# LlamaForCausalLM (2 layers, hidden 512, random weights, attn_implementation="sdpa") generating
# with cache_implementation="static" and model.forward = torch.compile(model.forward,
# mode="reduce-overhead"), once without flashsdpa and once inside enable(), each in a fresh
# subprocess with fresh inductor caches (python -X faulthandler, as the report). Prints one JSON
# line per side: the exit code (negative: a signal, -11 the segfault of the report), the outcome
# (the tokens, or the exception's type and first line) and the stderr tail where it failed.
#   PYTHONPATH=python python3 scripts/dev/hf_static_compile_probe.py [--tokens 12]
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

_CHILD = """
    import json, sys
    import torch
    import transformers
    import flashsdpa

    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256)
    model = transformers.LlamaForCausalLM._from_config(config, attn_implementation="sdpa",
        torch_dtype=torch.bfloat16).cuda().eval()
    model.forward = torch.compile(model.forward, mode="reduce-overhead")
    ids = torch.randint(0, 1000, (1, 16), device="cuda")

    def generate():
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=int(sys.argv[2]), do_sample=False,
                                 cache_implementation="static", pad_token_id=0)
        return out[0, ids.shape[1]:].tolist()

    def attempt():
        try:
            return ["ok", generate()]
        except Exception as e:
            return [type(e).__name__, str(e).splitlines()[0] if str(e) else ""]

    if sys.argv[1] == "outside":
        result = attempt()
    else:
        with flashsdpa.enable():
            result = attempt()
            result.append(flashsdpa.stats() if hasattr(flashsdpa, "stats") else None)
    print("JSON " + json.dumps(result, default=str), flush=True)
"""


def run_side(side: str, tokens: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", textwrap.dedent(_CHILD), side, str(tokens)],
                              capture_output=True, text=True, timeout=600, env=env)  # fmt: skip
    lines = [line[5:] for line in proc.stdout.splitlines() if line.startswith("JSON ")]
    return {
        "side": side,
        "rc": proc.returncode,
        "result": json.loads(lines[0]) if lines else None,
        "stderr_tail": proc.stderr[-1500:] if proc.returncode != 0 or not lines else "",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=12)
    args = parser.parse_args()
    sides = [run_side(side, args.tokens) for side in ("outside", "inside")]
    for s in sides:
        print(json.dumps(s, default=str))
    same = sides[0]["rc"] == sides[1]["rc"] and (
        (sides[0]["result"] or [None])[:2] == (sides[1]["result"] or [None])[:2]
    )
    print(f"hf static reduce-overhead: outside rc {sides[0]['rc']}, inside rc {sides[1]['rc']}, "
          f"same outcome: {same}")  # fmt: skip
    return 0 if same and sides[1]["rc"] >= 0 else 1


if __name__ == "__main__":
    sys.exit(main())
