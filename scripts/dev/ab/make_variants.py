"""make_variants.py (session 26): writes the A/B variants of session26_fifth.sh from the tree's
files, by exact string replacement (each must match once), into /tmp/variants/:
  decode_kernel_v3.cuh   the decode kernel's page ids read one tile ahead (fetch_pages), with the
                         tree's shift-and-mask page arithmetic (kernel_notes_decode.md, variant 3)
  decode_kernel_v4.cuh   the tile's page ids loaded before its copies (session 27, lost)
  decode_kernel_v5.cuh   the pass body straight-line: selects, one predicated table load (session 27)
  fwd_kernel_sm90_d64m128.cuh  the sm90 forward's d64 tile at 128 rows (kernel_notes_fwd_sm90.md)
  fwd_kernel_sm90_short64.cuh, fwd_launch_sm90_short64.cuh  the d64 short tile at 64 rows, two CTAs
                         an SM (session 27, not adopted; both files swap in together)
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OUT = Path(os.environ.get("VARIANTS_DIR", "/tmp/variants"))

# Variant 3 as edits of the tree's kernel: the fetch before load_kv, the copy at its start, the
# prefetched entry in place of the lookup (the page arithmetic stays the tree's shift or division).
V3_EDITS = [
    (
        "    auto load_kv = [&](int n_block, int stage) {\n"
        "      const uint32_t sk = smem_kv + stage * Traits::kSmemStageBytes + copy_smem_offset;\n",
        "    // V3 (session 26 A/B): the block-table entries of the next tile read one tile ahead.\n"
        "    constexpr int kKvPasses = kBlockN / Traits::kCopyRowsPerPass;\n"
        "    int32_t next_pages[kKvPasses] = {};\n"
        "    const auto fetch_pages = [&](int n_block) {\n"
        "#pragma unroll\n"
        "      for (int pass = 0; pass < kKvPasses; ++pass) {\n"
        "        const int key = n_block * kBlockN + copy_row + pass * Traits::kCopyRowsPerPass;\n"
        "        next_pages[pass] = key < seq.seqlen_k\n"
        "                               ? pages[p.page_shift >= 0 ? key >> p.page_shift : key / p.page_size] : 0;\n"
        "      }\n"
        "    };\n"
        "    if (paged) fetch_pages(range.begin);\n"
        "    auto load_kv = [&](int n_block, int stage) {\n"
        "      const uint32_t sk = smem_kv + stage * Traits::kSmemStageBytes + copy_smem_offset;\n"
        "      int32_t tile_pages[kKvPasses];\n"
        "#pragma unroll\n"
        "      for (int pass = 0; pass < kKvPasses; ++pass) tile_pages[pass] = next_pages[pass];\n"
        "      if (paged && n_block + 1 < range.end) fetch_pages(n_block + 1);  // tiles are issued in order\n",
    ),
    ("min(max(pages[page_index], 0), p.num_pages - 1)", "min(max(tile_pages[pass], 0), p.num_pages - 1)"),
]


# Variant 4 (session 27, lost): the tile's block-table entries loaded before its copies, the four
# passes' loads back to back (the tree issues each inside its pass's branches, one at a time).
V4_EDITS = [
    (
        "#pragma unroll\n"
        "      for (int pass = 0; pass < kBlockN / Traits::kCopyRowsPerPass; ++pass) {\n"
        "        const int key = n_block * kBlockN + copy_row + pass * Traits::kCopyRowsPerPass;\n"
        "        const bool ok = key < seq.seqlen_k;  // the block table is read only for keys in use\n",
        "      constexpr int kPasses = kBlockN / Traits::kCopyRowsPerPass;\n"
        "      int32_t tile_pages[kPasses] = {};\n"
        "      if (paged) {\n"
        "#pragma unroll\n"
        "        for (int pass = 0; pass < kPasses; ++pass) {\n"
        "          const int key = n_block * kBlockN + copy_row + pass * Traits::kCopyRowsPerPass;\n"
        "          const int page_index = p.page_shift >= 0 ? key >> p.page_shift : key / p.page_size;\n"
        "          tile_pages[pass] = key < seq.seqlen_k ? __ldg(pages + page_index) : 0;\n"
        "        }\n"
        "      }\n"
        "#pragma unroll\n"
        "      for (int pass = 0; pass < kPasses; ++pass) {\n"
        "        const int key = n_block * kBlockN + copy_row + pass * Traits::kCopyRowsPerPass;\n"
        "        const bool ok = key < seq.seqlen_k;\n",
    ),
    ("min(max(pages[page_index], 0), p.num_pages - 1)", "min(max(tile_pages[pass], 0), p.num_pages - 1)"),
]


# Variant 5 (session 27, not yet run): the pass body straight-line, selects and one predicated
# block-table load instead of the tree's nested branches (its SASS re-reads page_shift from the
# constant bank and branches twice per pass; variants 3 and 4 kept that structure).
V5_EDITS = [("        int64_t k_off = 0, v_off = 0;\n        if (ok) {\n          if (paged) {\n            // Shift and mask for a power-of-two page (params.h's page_shift): session 26 measured the\n            // division's path at ~1.2x the contiguous cache's time (H200, B 1 x 128k keys, even with\n            // 1024-key pages in order; scripts/dev/paged_probe.py).\n            const int page_index = p.page_shift >= 0 ? key >> p.page_shift : key / p.page_size;\n            const int in_page = p.page_shift >= 0 ? key & (p.page_size - 1) : key - page_index * p.page_size;\n            // A block-table entry outside the pool (bad metadata the host did not read: that is a\n            // sync) is clamped into it: wrong values for that sequence, never memory outside.\n            const int64_t page = min(max(pages[page_index], 0), p.num_pages - 1);\n            k_off = page * p.k_batch_stride + in_page * p.k_row_stride;\n            v_off = page * p.v_batch_stride + in_page * p.v_row_stride;\n          } else {\n            k_off = key * p.k_row_stride;\n            v_off = key * p.v_row_stride;\n          }\n        }\n", '        // V5: straight-line (selects and a predicated load, no per-pass branches): keys past the\n        // end read row 0 (the copy is zero-filled anyway), a contiguous cache takes page 0.\n        const int row = ok ? key : 0;\n        const bool pow2 = p.page_shift >= 0;\n        const int page_index = !paged ? 0 : pow2 ? row >> p.page_shift : row / p.page_size;\n        const int in_page = !paged ? row : pow2 ? row & (p.page_size - 1) : row - page_index * p.page_size;\n        const int64_t page = paged ? min(max(__ldg(pages + page_index), 0), p.num_pages - 1) : 0;\n        const int64_t k_off = page * p.k_batch_stride + int64_t(in_page) * p.k_row_stride;\n        const int64_t v_off = page * p.v_batch_stride + int64_t(in_page) * p.v_row_stride;\n')]


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


DECODE = "cuda/sm80/decode_kernel_sm80.cuh"
FWD_SM90 = "cuda/sm90/fwd_kernel_sm90.cuh"
VARIANTS = {
    "decode_kernel_v3.cuh": (DECODE, V3_EDITS),
    "decode_kernel_v4.cuh": (DECODE, V4_EDITS),
    "decode_kernel_v5.cuh": (DECODE, V5_EDITS),
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
