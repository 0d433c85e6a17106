"""overhead_only.py: just the bench's per-call overhead report (python -m flashsdpa bench measures
it too, before its sweep); for a short device call."""

import torch

from flashsdpa import bench

result = bench._overhead_us(torch.bfloat16)
bench._print_overhead(result)
