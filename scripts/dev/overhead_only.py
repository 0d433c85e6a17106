"""overhead_only.py: the bench's per-call overhead report alone (python -m flashsdpa bench measures
it too, before its sweep), then flashsdpa.stats(): which road the measured calls took. For a short
device call; scripts/dev/overhead_probe.py breaks the time down by layer."""

import torch

import flashsdpa
from flashsdpa.bench.overhead import overhead_us
from flashsdpa.bench.report import print_overhead

result = overhead_us(torch.bfloat16)
print_overhead(result)
print({op: counts for op, counts in flashsdpa.stats()["ops"].items() if counts["served"] or counts["fallback"]})
