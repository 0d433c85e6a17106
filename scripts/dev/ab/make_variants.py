"""make_variants.py (session 26): writes the A/B variants of session26_fifth.sh from the tree's
files, by exact string replacement (each must match once), into /tmp/variants/:
  fwd_kernel_sm90_d64m128.cuh  the sm90 forward's d64 tile at 128 rows (kernel_notes_fwd_sm90.md)
  fwd_kernel_sm90_short64.cuh, fwd_launch_sm90_short64.cuh  the d64 short tile at 64 rows, two CTAs
                         an SM (session 27, not adopted; both files swap in together)
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OUT = Path(os.environ.get("VARIANTS_DIR", "/tmp/variants"))

# The decode kernel's page-lookup variants 3-5 (sessions 26-27) were edits of the kernel before
# session 28, which adopted variant 5: they are in main's history at 27f93e6 (this file).

# The d64 short tile at 64 rows, two CTAs an SM (session 27, not adopted: kernel_notes_fwd_sm90.md):
# the kernel's one-consumer support (kCtasPerSm: the launch bound, setmaxnreg 32 / 224, no
# ping-pong with one warpgroup, the dynamic schedule's threshold) and the launcher's grid of
# 2 x SMs; both files are swapped in together.
SHORT64_KERNEL_EDITS = [('  static constexpr bool kPingPong = kPingPong_;\n', '  static constexpr bool kPingPong = kPingPong_ && (kBlockM_ / 64) > 1;  // one warpgroup: no one to take turns with\n'), ('  static constexpr int kThreads = 128 * (kConsumerWGs + 1);\n', "  static constexpr int kThreads = 128 * (kConsumerWGs + 1);\n  // A 64-row tile (one consumer warpgroup) runs two CTAs an SM: the two CTAs' warpgroups overlap\n  // one's softmax with the other's GEMMs as ping-pong does inside a CTA (cuDNN's d64 forward at\n  // short sequences: a 64 x 128 tile, kernel `..._64x128x64_4x1x1`). The launch bound caps ptxas\n  // at 128 registers a thread (64K / 2 CTAs / 256 threads); setmaxnreg then moves them.\n  static constexpr int kCtasPerSm = kConsumerWGs == 1 ? 2 : 1;\n"), ('  static constexpr int kProducerRegs = kConsumerWGs == 2 ? (kBiasSplit ? 32 : 24) : 32;\n  static constexpr int kConsumerRegs = kConsumerWGs == 2 ? (kBiasSplit ? 232 : 240) : 160;\n', '  // One consumer (two CTAs an SM, 32K registers each): 32 x 128 + 224 x 128 = 32,768.\n  static constexpr int kProducerRegs = kConsumerWGs == 2 ? (kBiasSplit ? 32 : 24) : 32;\n  static constexpr int kConsumerRegs = kConsumerWGs == 2 ? (kBiasSplit ? 232 : 240) : kConsumerWGs == 1 ? 224 : 160;\n'), ('  static_assert(kSmemBytes <= 227 * 1024, "over the sm_90 per-block shared memory limit");\n', '  static_assert(kSmemBytes <= 227 * 1024, "over the sm_90 per-block shared memory limit");\n  static_assert(kCtasPerSm == 1 || kCtasPerSm * (kSmemBytes + 1024) <= 228 * 1024, "two CTAs an SM must fit its 228 KB");\n'), ('  if (persistent && fwd_sm90_dynamic<Traits>(p) && tiles > p.num_sms)\n', '  if (persistent && fwd_sm90_dynamic<Traits>(p) && tiles > int64_t(p.num_sms) * Traits::kCtasPerSm)\n'), ('__global__ void __launch_bounds__(Traits::kThreads, 1) flashsdpa_fwd_sm90_kernel(', '__global__ void __launch_bounds__(Traits::kThreads, Traits::kCtasPerSm) flashsdpa_fwd_sm90_kernel('), ('constexpr FwdTileShapeSm90 kFwdShortTileSm90{128, 128, 2};', 'constexpr FwdTileShapeSm90 kFwdShortTileSm90{64, 128, 2};')]
SHORT64_LAUNCH_EDITS = [("  // Persistent: one CTA per SM (the tile needs all of an SM's shared memory), fewer for few tiles.\n  const fwd_sm90::PersistentTileScheduler scheduler = fwd_sm90::fwd_sm90_scheduler<Traits>(params);\n  const int64_t tiles = scheduler.num_tiles();\n  if (tiles == 0) return cudaSuccess;\n  const int64_t grid =\n      !persistent ? tiles : (tiles < params.num_sms ? tiles : (params.num_sms > 0 ? params.num_sms : 1));\n", "  // Persistent: one CTA per SM (the tile needs all of an SM's shared memory; two for a 64-row\n  // tile: Traits::kCtasPerSm), fewer for few tiles.\n  const fwd_sm90::PersistentTileScheduler scheduler = fwd_sm90::fwd_sm90_scheduler<Traits>(params);\n  const int64_t tiles = scheduler.num_tiles();\n  if (tiles == 0) return cudaSuccess;\n  const int64_t slots = int64_t(params.num_sms > 0 ? params.num_sms : 1) * Traits::kCtasPerSm;\n  const int64_t grid = !persistent ? tiles : (tiles < slots ? tiles : slots);\n")]


def variant(path: str, edits: list[tuple[str, str]]) -> str:
    """The tree's file at `path` with each (old, new) edit made; each old text must match once."""
    s = (ROOT / path).read_text()
    for old, new in edits:
        assert s.count(old) == 1, f"{path} changed: {old[:60]!r}"
        s = s.replace(old, new)
    return s


FWD_SM90 = "cuda/sm90/fwd_kernel_sm90.cuh"
VARIANTS = {
    "fwd_kernel_sm90_d64m128.cuh": (
        FWD_SM90,
        [("  return head_dim <= 64    ? FwdTileShapeSm90{192, 128, 2}", "  return head_dim <= 64    ? FwdTileShapeSm90{128, 128, 2}")],
    ),
    "fwd_kernel_sm90_short64.cuh": (FWD_SM90, SHORT64_KERNEL_EDITS),
    "fwd_launch_sm90_short64.cuh": ("cuda/sm90/fwd_launch_sm90.cuh", SHORT64_LAUNCH_EDITS),
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (path, edits) in VARIANTS.items():
        (OUT / name).write_text(variant(path, edits))
    print(f"variants in {OUT}")


if __name__ == "__main__":
    main()
