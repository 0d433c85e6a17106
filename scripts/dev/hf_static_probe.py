"""hf_static_probe.py: test_process_crashes.py's Hugging Face static-cache reduce-overhead child
(issue 10, item 9) run bare (flashsdpa not imported), outside (imported, not active) and inside
enable(), each in a fresh process with fresh inductor caches; the exit code, outcome and the
whole stderr (faulthandler's stacks) of each into OUT/hf_SIDE.txt.
    PYTHONPATH=python python3 scripts/dev/hf_static_probe.py OUT [SIDE ...] [--no-static-launcher]

--no-static-launcher sets torch._inductor.config.use_static_cuda_launcher = False in the child
(the launcher the crash is in): whether that is the user's workaround.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "tests" / "gpu"), str(Path(__file__).resolve().parents[2] / "tests")]
import tempfile  # noqa: E402

import test_process_crashes as t  # noqa: E402

out = Path(sys.argv[1])
extra = [a[2:] for a in sys.argv[2:] if a.startswith("--")]
for side in [a for a in sys.argv[2:] if not a.startswith("--")] or ["bare", "outside", "inside"]:
    with tempfile.TemporaryDirectory() as cache:
        full: list[str] = []
        rc, lines, err = t._run(t._HF_STATIC_SCRIPT, side, *extra, timeout=300,
                                env={"TORCHINDUCTOR_CACHE_DIR": cache}, stderr_sink=full)  # fmt: skip
    name = "_".join([side, *extra])
    (out / f"hf_{name}.txt").write_text(f"rc {rc}\n{lines}\n{full[0] if full else err}")
    print(f"{name}: rc {rc} {lines}", flush=True)
