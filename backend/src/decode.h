// decode.h: the host's plan of a decode call (issue 11): which family's decode kernel serves it
// (the capability table, Layout::kDecode), how many splits of the keys (a shape-only heuristic, or
// the caller's), and the workspace the caller allocates for the split partials. No device
// memory is allocated or read here, so a decode step stays CUDA-graph capturable.
#pragma once

#include <cstdint>
#include <string>

#include "capabilities.h"
#include "flashsdpa/params.h"

namespace flashsdpa {

// Dense calls (not a KV-cache call) take the decode kernel up to this many query rows: its 16-row
// packed tiles then read each K/V head ceil(Sq * group / 16) <= group times, the forward's 128-row
// tiles group times (once per query head) with up to 127/128 of their rows idle.
constexpr int kDecodeMaxSeqlenQ = 16;

struct DecodeShape {
  int32_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim_qk, head_dim_v;
};

struct DecodePlan {
  const FamilyCaps* family = nullptr;  // nullptr: no decode kernel serves it (reasons says why)
  int bucket = 0;
  int num_splits = 0;
  int64_t o_accum_bytes = 0;    // float32 [splits, B, Hq, Sq, Dv]; 0 with one split
  int64_t lse_accum_bytes = 0;  // float32 [splits, B, Hq, Sq]
  std::string reasons;
};

// FlashAttention-2's rule: the smallest split count whose wave efficiency (CTAs / slots over the
// waves they take) is within 85% of the best, one split when the grid already fills 80% of the
// slots; a split count that leaves the blocks per split unchanged is never taken.
int num_splits_heuristic(int64_t ctas, int n_blocks, int slots, int max_splits);

// Workspace of `splits` splits (zero for one).
void decode_workspace(const DecodeShape& shape, int splits, int64_t* o_accum_bytes, int64_t* lse_accum_bytes);

// The plan for one call on `device`. kv_cache: a flashsdpa.attention_with_kvcache call (always the
// decode kernel: it reads paged caches and cache lengths); else a dense call, which takes it only
// for seqlen_q <= kDecodeMaxSeqlenQ. forced_splits: 0 = heuristic, else 1..kMaxSplits. features:
// the call's Feature bits (a masked call's kBias), checked against the family's decode_features.
DecodePlan decode_plan(int device, DType dtype, const DecodeShape& shape, MaskKind mask, bool kv_cache,
                       int forced_splits, unsigned features = 0);

}  // namespace flashsdpa
