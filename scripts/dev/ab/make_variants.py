"""make_variants.py (session 26): writes the A/B variants of session26_fifth.sh from the tree's
files, by exact string replacement (each must match once), into /tmp/variants/:
  decode_kernel_v3.cuh   the decode kernel's page ids read one tile ahead (fetch_pages), with the
                         tree's shift-and-mask page arithmetic (kernel_notes_decode.md, variant 3)
  fwd_kernel_sm90_d64m128.cuh  the sm90 forward's d64 tile at 128 rows (kernel_notes_fwd_sm90.md)
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OUT = Path(os.environ.get("VARIANTS_DIR", "/tmp/variants"))

V3_NEW = '''    // V3 (session 26 A/B): the block-table entries of the next tile read one tile ahead, with the
    // shift-and-mask page arithmetic (variant 1 lost with the division done twice a row).
    constexpr int kKvPasses = kBlockN / Traits::kCopyRowsPerPass;
    int32_t next_pages[kKvPasses] = {};
    const auto page_of = [&](int key) { return p.page_shift >= 0 ? key >> p.page_shift : key / p.page_size; };
    const auto fetch_pages = [&](int n_block) {
#pragma unroll
      for (int pass = 0; pass < kKvPasses; ++pass) {
        const int key = n_block * kBlockN + copy_row + pass * Traits::kCopyRowsPerPass;
        next_pages[pass] = key < seq.seqlen_k ? pages[page_of(key)] : 0;  // keys in use only
      }
    };
    if (paged) fetch_pages(range.begin);
    auto load_kv = [&](int n_block, int stage) {
      const uint32_t sk = smem_kv + stage * Traits::kSmemStageBytes + copy_smem_offset;
      int32_t tile_pages[kKvPasses];
#pragma unroll
      for (int pass = 0; pass < kKvPasses; ++pass) tile_pages[pass] = next_pages[pass];
      if (paged && n_block + 1 < range.end) fetch_pages(n_block + 1);  // tiles are issued in order
#pragma unroll
      for (int pass = 0; pass < kKvPasses; ++pass) {
        const int key = n_block * kBlockN + copy_row + pass * Traits::kCopyRowsPerPass;
        const bool ok = key < seq.seqlen_k;
        int64_t k_off = 0, v_off = 0;
        if (ok) {
          if (paged) {
            const int in_page = p.page_shift >= 0 ? key & (p.page_size - 1) : key - page_of(key) * p.page_size;
            const int64_t page = min(max(tile_pages[pass], 0), p.num_pages - 1);
            k_off = page * p.k_batch_stride + in_page * p.k_row_stride;
            v_off = page * p.v_batch_stride + in_page * p.v_row_stride;
          } else {
            k_off = key * p.k_row_stride;
            v_off = key * p.v_row_stride;
          }
        }
'''


def decode_v3() -> str:
    s = (ROOT / "cuda/sm80/decode_kernel_sm80.cuh").read_text()
    start = s.index("    auto load_kv = [&](int n_block, int stage) {")
    end = s.index("        const uint32_t row_smem = sk + pass * Traits::kCopyRowsPerPass * kRowBytes;")
    return s[:start] + V3_NEW + s[end:]


def fwd_d64m128() -> str:
    s = (ROOT / "cuda/sm90/fwd_kernel_sm90.cuh").read_text()
    old = "  return head_dim <= 64    ? FwdTileShapeSm90{192, 128, 2}"
    assert s.count(old) == 1, "the d64 tile line moved"
    return s.replace(old, "  return head_dim <= 64    ? FwdTileShapeSm90{128, 128, 2}")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "decode_kernel_v3.cuh").write_text(decode_v3())
    (OUT / "fwd_kernel_sm90_d64m128.cuh").write_text(fwd_d64m128())
    print(f"variants in {OUT}")


if __name__ == "__main__":
    main()
