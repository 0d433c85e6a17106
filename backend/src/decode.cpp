// decode.cpp: see decode.h.
#include "decode.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "launch.h"

namespace flashsdpa {

int num_splits_heuristic(int64_t ctas, int n_blocks, int slots, int max_splits) {
  if (ctas >= 0.8 * slots || n_blocks <= 1) return 1;
  max_splits = std::min({max_splits, n_blocks, kMaxSplits});
  const auto blocks_per_split = [&](int s) { return (n_blocks + s - 1) / s; };
  const auto eligible = [&](int s) { return s == 1 || blocks_per_split(s) != blocks_per_split(s - 1); };
  const auto efficiency = [&](int s) {
    const double waves = double(ctas) * s / slots;
    return waves / std::ceil(waves);
  };
  double best = 0.0;
  for (int s = 1; s <= max_splits; ++s)
    if (eligible(s)) best = std::max(best, efficiency(s));
  for (int s = 1; s <= max_splits; ++s)
    if (eligible(s) && efficiency(s) >= 0.85 * best) return s;
  return 1;
}

void decode_workspace(const DecodeShape& shape, int splits, int64_t* o_accum_bytes, int64_t* lse_accum_bytes) {
  const int64_t rows = splits > 1 ? int64_t(splits) * shape.batch * shape.heads_q * shape.seqlen_q : 0;
  *o_accum_bytes = rows * shape.head_dim_v * int64_t(sizeof(float));
  *lse_accum_bytes = rows * int64_t(sizeof(float));
}

DecodePlan decode_plan(int device, DType dtype, const DecodeShape& shape, MaskKind mask, bool kv_cache,
                       int forced_splits, unsigned features) {
  DecodePlan plan;
  if (forced_splits < 0 || forced_splits > kMaxSplits)
    throw std::invalid_argument("num_splits=" + std::to_string(forced_splits) + ": needs 0 (heuristic) to " +
                                std::to_string(kMaxSplits));
  if (!kv_cache && shape.seqlen_q > kDecodeMaxSeqlenQ) {
    plan.reasons = "seqlen_q=" + std::to_string(shape.seqlen_q) + " > " + std::to_string(kDecodeMaxSeqlenQ) +
                   ": the forward's 128-row tiles serve it better";
    return plan;
  }
  if (shape.heads_kv < 1 || shape.heads_q % shape.heads_kv != 0 || shape.batch < 1 || shape.seqlen_q < 1) {
    plan.reasons = "empty or malformed shape";
    return plan;
  }
  const Selection s = select(device, dtype, shape.head_dim_qk, shape.head_dim_v, mask, Layout::kDecode, Direction::kForward,
                             false, features);
  if (s.family == nullptr) {
    plan.reasons = s.reasons;
    return plan;
  }
  // FLASHSDPA_FAMILY=<name> (tests run each shape on each family) names a family without a
  // decode path: dense calls then keep that family's forward; a KV-cache call says why not.
  static const char* forced = std::getenv("FLASHSDPA_FAMILY");
  if (forced != nullptr && s.family->name != forced) {
    plan.reasons = std::string("FLASHSDPA_FAMILY=") + forced + ": the decode path is family " + s.family->name + "'s";
    return plan;
  }
  plan.family = s.family;
  plan.bucket = s.bucket;
  const DecodeTile tile = s.family->decode_tile(s.bucket);
  const DeviceInfo info = device_info(device);
  // CTAs per SM: shared memory (an SM has ~1 KB more than a block may opt in to, and the runtime
  // reserves 1 KB per block), at most 2: one resident decode CTA already keeps 2 stages x 32 KB in
  // flight at d = 128, more than the ~26 KB that the SM's share of DRAM bandwidth x latency asks,
  // so a second mostly hides the prologue / epilogue of short splits.
  const int per_sm = std::max(1, std::min<int>(2, int((info.smem_optin_bytes + 1024) / (tile.smem_bytes + 1024))));
  const int64_t packed_rows = int64_t(shape.seqlen_q) * (shape.heads_q / shape.heads_kv);
  const int64_t ctas = (packed_rows + tile.block_m - 1) / tile.block_m * shape.heads_kv * shape.batch;
  const int n_blocks = std::max(1, (shape.seqlen_k + tile.block_n - 1) / tile.block_n);
  plan.num_splits = forced_splits > 0 ? forced_splits : num_splits_heuristic(ctas, n_blocks, info.sms * per_sm, kMaxSplits);
  decode_workspace(shape, plan.num_splits, &plan.o_accum_bytes, &plan.lse_accum_bytes);
  return plan;
}

}  // namespace flashsdpa
