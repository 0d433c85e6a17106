// capabilities.cpp: see capabilities.h. The family table is the list in make_families(); a family
// is compiled in when CMake defines FLASHSDPA_FAMILY_<NAME> (cuda/instantiations/families.cmake)
// with its compiled head dims and archs.
#include "capabilities.h"

#include <algorithm>
#include <climits>
#include <sstream>

#include "build_config.h"

namespace flashsdpa {
namespace {

std::vector<int> ints(const std::string& csv) {
  std::vector<int> out;
  std::stringstream ss(csv);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(std::stoi(item));
  }
  std::sort(out.begin(), out.end());
  return out;
}

template <typename T>
bool contains(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string capability_str(int c) { return std::to_string(c / 10) + "." + std::to_string(c % 10); }
const char* dtype_name(DType d) { return d == DType::kFloat16 ? "float16" : "bfloat16"; }
const char* direction_name(Direction d) { return d == Direction::kForward ? "forward" : "backward"; }
}  // namespace

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kDense: return "dense";
    case Layout::kVarlen: return "varlen";
    default: return "decode";
  }
}

namespace {

constexpr Feature kAllFeatures[] = {Feature::kSoftcap, Feature::kAlibi, Feature::kSinks, Feature::kBias,
                                     Feature::kDropout};
const std::vector<MaskKind> kAllMasks = {MaskKind::kNone, MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight,
                                         MaskKind::kWindow};

std::vector<FamilyCaps> make_families() {
  std::vector<FamilyCaps> table;
  // Arch-specific families go first: select_family takes the first that serves a problem.
#ifdef FLASHSDPA_FAMILY_SM90
  // wgmma / TMA / setmaxnreg SASS for sm_90a runs on compute capability 9.0 only. Dense (and
  // varlen forwards: packed rows through TMA, O by plain stores), every mask kind, the backward in
  // the forward's buckets (64, 128, 256, 512), deterministic backward
  // (ordered dQ adds; not with the slopes' or sinks' gradients: check_deterministic), the score
  // modifiers in both directions (their kMods instantiations: equal to the portable kernels in
  // scripts/dev/fwd_check.cu's and bwd_check_sm90.cu's "mods" modes on the H200, sessions 6 and 7):
  // the rest of an H100's calls take the portable family below.
  table.push_back(FamilyCaps{
      "sm90", "compute capability 9.0 only (sm_90a: wgmma, TMA, warp specialization)", 90, 90,
      ints(FLASHSDPA_SM90_ARCHS_LIST), build_config().dtypes, ints(FLASHSDPA_SM90_FWD_HEAD_DIMS_LIST),
      ints(FLASHSDPA_SM90_BWD_HEAD_DIMS_LIST), kAllMasks, {Layout::kDense, Layout::kVarlen},
      // Dropout in both directions (the backward's kDropout kernel reads FA2's mask transposed:
      // common/dropout.cuh's dropout_bytes_t), deterministic backward and first-store dQ included.
      {Direction::kForward, Direction::kBackward},
      {Feature::kSoftcap, Feature::kAlibi, Feature::kSinks, Feature::kBias, Feature::kDropout},
      {Feature::kSoftcap, Feature::kAlibi, Feature::kSinks, Feature::kBias, Feature::kDropout}, &run_fwd_sm90, &run_bwd_sm90, &fwd_plan_sm90, &bwd_plan_sm90,
      &fwd_sm90_unsupported, &bwd_sm90_unsupported, nullptr, nullptr, /*deterministic_backward=*/true,
      /*dq_first_store=*/true});
  table.back().bwd_layouts = {Layout::kDense};  // varlen backwards: the portable family
  table.back().fwd_workspace = &fwd_workspace_sm90;  // the split tail (fwd_kernel_sm90.cuh)
  table.back().fwd_yields = &fwd_sm90_yields;        // short d <= 64 forwards (tiles_sm90.cu)
  // Head dims 264-512 (Gemma's global layers): a two-CTA cluster splits D (O of 64 rows x 512
  // columns is more than a warpgroup's registers). Every mask kind, GQA; dense, nothing else yet.
  // Its backward splits D the same way (bwd_kernel_sm90.cuh's kSplit: the 256 tile on each CTA of
  // a pair). Head dim 256's backward: a 64-key tile of its own (kWide) with dQ by float
  // reductions: plain calls, any order (not deterministic); 512's likewise.
  table.back().bucket_limits = {{512, Direction::kForward, {Layout::kDense}, 0u, "its two-CTA cluster kernel"},
                                {512, Direction::kBackward, {Layout::kDense}, 0u,
                                 "its two-CTA cluster kernel, which adds dQ with float reductions in any order",
                                 /*deterministic=*/false},
                                {256, Direction::kBackward, {Layout::kDense}, 0u,
                                 "its 64-key tile, which adds dQ with float reductions in any order",
                                 /*deterministic=*/false}};
#endif
#ifdef FLASHSDPA_FAMILY_SM80
  {
    const std::vector<int> archs = ints(FLASHSDPA_SM80_ARCHS_LIST);
    const int lowest = archs.empty() ? 80 : std::max(80, archs.front());
    // SASS of the same major at or below the device's minor runs there (sm_80 SASS on 8.6, 8.9);
    // above the compiled archs the driver JIT-compiles the embedded PTX (first launches slower).
    table.push_back(FamilyCaps{
        "sm80", "compute capability " + capability_str(lowest) + " and newer (mma.sync, ldmatrix, cp.async)",
        lowest, 0, archs, build_config().dtypes, ints(FLASHSDPA_SM80_FWD_HEAD_DIMS_LIST),
        ints(FLASHSDPA_SM80_BWD_HEAD_DIMS_LIST), kAllMasks, {Layout::kDense, Layout::kVarlen, Layout::kDecode},
        // Dropout: FlashAttention-2's mask in both directions (common/dropout.cuh), dense only (checked in
        // Python: the routers' varlen calls keep PyTorch's kernel, which owns that layout's offsets).
        {Direction::kForward, Direction::kBackward},
        {Feature::kSoftcap, Feature::kAlibi, Feature::kSinks, Feature::kBias, Feature::kDropout},
        {Feature::kSoftcap, Feature::kAlibi, Feature::kSinks, Feature::kBias, Feature::kDropout},
        &run_fwd_sm80, &run_bwd_sm80, &fwd_plan_sm80, &bwd_plan_sm80, nullptr, nullptr, &run_decode_sm80,
        &decode_tile_sm80});
    table.back().bwd_layouts = {Layout::kDense, Layout::kVarlen};
    // A masked decode-sized call (padded batched generation): decode_kernel_sm80.cuh's kModsBias
    // kernel. Softcap / ALiBi / sinks have no decode kernel: those calls run the forward.
    table.back().decode_features = {Feature::kBias};
  }
#endif
  return table;
}

// ---- the serving rule: one predicate per limit, each naming it on failure ------------------------
using Check = bool (*)(const FamilyCaps&, const Problem&, std::string*);

bool check_capability(const FamilyCaps& f, const Problem& p, std::string* why) {
  if (p.capability == 0) return true;
  if (p.capability >= f.min_capability && (f.max_capability == 0 || p.capability <= f.max_capability)) return true;
  if (why) *why = "compute capability " + capability_str(p.capability) + ": runs on " + f.runs_on;
  return false;
}

bool check_dtype(const FamilyCaps& f, const Problem& p, std::string* why) {
  if (contains(f.dtypes, std::string(dtype_name(p.dtype)))) return true;
  if (why) *why = std::string("dtype ") + dtype_name(p.dtype) + ": not compiled (rebuild with FLASHSDPA_DTYPES)";
  return false;
}

std::string int_list(const std::vector<int>& v) {
  std::string out;
  for (int d : v) out += (out.empty() ? "" : ", ") + std::to_string(d);
  return "{" + out + "}";
}

// The family's bucket for the problem, then whether this direction has it (after check_direction).
bool check_head_dims(const FamilyCaps& f, const Problem& p, std::string* why) {
  const int bucket = f.bucket(p.head_dim_qk, p.head_dim_v);
  const std::vector<int>& served = f.head_dims(p.direction);
  if (bucket != 0 && std::binary_search(served.begin(), served.end(), bucket)) return true;
  if (why && bucket == 0)
    *why = "head_dim_qk=" + std::to_string(p.head_dim_qk) + ", head_dim_v=" + std::to_string(p.head_dim_v) +
           ": compiled head-dim buckets are " + int_list(f.all_head_dims()) + " (rebuild with FLASHSDPA_HEAD_DIMS)";
  else if (why)
    *why = "head_dim=" + std::to_string(bucket) + " " + direction_name(p.direction) + ": the " + f.name +
           " family's " + direction_name(p.direction) + " has buckets " + int_list(served);
  return false;
}

bool check_mask(const FamilyCaps& f, const Problem& p, std::string* why) {
  if (contains(f.masks, p.mask)) return true;
  if (why) *why = std::string("mask ") + mask_kind_name(p.mask) + ": not supported";
  return false;
}

bool check_layout(const FamilyCaps& f, const Problem& p, std::string* why) {
  if (contains(f.layouts_of(p.direction), p.layout)) return true;
  if (why)
    *why = std::string(layout_name(p.layout)) + " inputs: not supported by the " + f.name + " family's " +
           direction_name(p.direction);
  return false;
}

bool check_direction(const FamilyCaps& f, const Problem& p, std::string* why) {
  if (p.layout == Layout::kDecode && p.direction != Direction::kForward) {
    if (why) *why = "the decode path is forward only (its backward is the dense one)";
    return false;
  }
  if (contains(f.directions, p.direction)) return true;
  if (why) *why = std::string("the ") + direction_name(p.direction) + " pass: not implemented";
  return false;
}

bool check_deterministic(const FamilyCaps& f, const Problem& p, std::string* why) {
  if (!p.deterministic || p.direction != Direction::kBackward) return true;
  if (!f.deterministic_backward) {
    if (why)
      *why = "torch.use_deterministic_algorithms(True): the " + f.name +
             " family's backward adds dQ with float atomics in any order (not bitwise reproducible)";
    return false;
  }
  // The slopes' and sinks' gradients (and the row sums they are finished from) are float atomic
  // sums over key blocks in every family; softcap adds no gradient of its own.
  const unsigned atomic_grads = static_cast<unsigned>(Feature::kAlibi) | static_cast<unsigned>(Feature::kSinks);
  if ((p.features & atomic_grads) == 0) return true;
  if (why)
    *why = "torch.use_deterministic_algorithms(True): the " + f.name +
           " family's backward sums the ALiBi slopes' and the sinks' gradients with float atomics (not bitwise "
           "reproducible)";
  return false;
}

bool check_features(const FamilyCaps& f, const Problem& p, std::string* why) {
  std::string missing;
  if (p.layout == Layout::kDecode) {  // the decode path's own list, the bias included
    for (Feature x : kAllFeatures) {
      if ((p.features & static_cast<unsigned>(x)) != 0 && !contains(f.decode_features, x))
        missing += (missing.empty() ? "" : ", ") + std::string(feature_name(x));
    }
    if (missing.empty()) return true;
    if (why) *why = missing + ": not served by the " + f.name + " family's decode path";
    return false;
  }
  for (Feature x : {Feature::kSoftcap, Feature::kAlibi, Feature::kSinks, Feature::kDropout}) {
    if ((p.features & static_cast<unsigned>(x)) != 0 && !contains(f.features(p.direction), x))
      missing += (missing.empty() ? "" : ", ") + std::string(feature_name(x));
  }
  // Dropout kernels exist beside the plain ones only: no family pairs it with a score modifier.
  const unsigned dropout = static_cast<unsigned>(Feature::kDropout);
  if (missing.empty() && (p.features & dropout) != 0 && (p.features & ~dropout) != 0) {
    if (why) *why = "dropout with score modifiers or a bias: no kernel of the " + f.name + " family has both";
    return false;
  }
  if (missing.empty()) return true;
  if (why) *why = missing + ": not served by the " + f.name + " family's " + direction_name(p.direction);
  return false;
}

// The bucket's own limits where it has them (FamilyCaps::bucket_limits), after check_head_dims.
bool check_bucket_limits(const FamilyCaps& f, const Problem& p, std::string* why) {
  if (f.bucket_limits.empty()) return true;
  const int bucket = f.bucket(p.head_dim_qk, p.head_dim_v);
  for (const BucketLimits& b : f.bucket_limits) {
    if (b.bucket != bucket || b.direction != p.direction) continue;
    std::string missing;
    if (!contains(b.layouts, p.layout)) missing = std::string(layout_name(p.layout)) + " inputs";
    for (Feature x : kAllFeatures) {
      if ((p.features & static_cast<unsigned>(x)) != 0 && (b.features & static_cast<unsigned>(x)) == 0)
        missing += (missing.empty() ? "" : ", ") + std::string(feature_name(x));
    }
    if (p.deterministic && !b.deterministic)
      missing += (missing.empty() ? "" : ", ") + std::string("torch.use_deterministic_algorithms(True)");
    if (missing.empty()) return true;
    if (why)
      *why = missing + ": not served in the " + f.name + " family's head-dim bucket " + std::to_string(bucket) + " (" +
             b.kernel + ", " + direction_name(p.direction) + ")";
    return false;
  }
  return true;
}

// Shared memory: whether some tile of this direction fits the device's per-block limit (parts
// with less than an H100's 227 KB get smaller tiles; the largest head dims fit none on some).
bool check_tile(const FamilyCaps& f, const Problem& p, std::string* why) {
  if (p.capability == 0) return true;
  const int bucket = f.bucket(p.head_dim_qk, p.head_dim_v);
  if (p.layout == Layout::kDecode) {
    const DecodeTile tile = f.decode_tile(bucket);
    if (tile.block_m > 0 && tile.smem_bytes <= p.smem_optin_bytes) return true;
    if (why)
      *why = "head_dim=" + std::to_string(bucket) + " decode: its tile needs " + std::to_string(tile.smem_bytes / 1024) +
             " KB of shared memory per block, the device has " + std::to_string(p.smem_optin_bytes / 1024);
    return false;
  }
  if (f.plan(p.direction, bucket, p.capability / 10, p.smem_optin_bytes).tile >= 0) return true;
  if (why)
    *why = std::string("head_dim=") + std::to_string(bucket) + " " + direction_name(p.direction) +
           ": no tile fits the device's " + std::to_string(p.smem_optin_bytes / 1024) +
           " KB of shared memory per block";
  return false;
}

// In order: later checks may assume earlier ones passed (check_head_dims needs a direction the
// family has, check_tile a bucket of that direction).
constexpr Check kChecks[] = {check_capability, check_dtype,    check_direction,     check_head_dims,
                             check_mask,       check_layout,   check_features,      check_bucket_limits,
                             check_deterministic, check_tile};

}  // namespace

Layout layout_of(const AttnFwdParams& p) {
  if (p.num_splits > 0) return Layout::kDecode;
  return p.cu_seqlens_q != nullptr ? Layout::kVarlen : Layout::kDense;
}

MaskKind mask_kind(const MaskSpec& m) {
  if (m.is_none()) return MaskKind::kNone;
  if (m.is_causal()) return m.align == MaskAlign::kTopLeft ? MaskKind::kCausalTopLeft : MaskKind::kCausalBottomRight;
  return MaskKind::kWindow;
}

const char* mask_kind_name(MaskKind kind) {
  switch (kind) {
    case MaskKind::kNone: return "none";
    case MaskKind::kCausalTopLeft: return "causal_top_left";
    case MaskKind::kCausalBottomRight: return "causal_bottom_right";
    default: return "window";
  }
}

const char* feature_name(Feature f) {
  switch (f) {
    case Feature::kSoftcap: return "softcap";
    case Feature::kAlibi: return "alibi";
    case Feature::kBias: return "bias";
    case Feature::kDropout: return "dropout";
    default: return "sinks";
  }
}

unsigned feature_bits(const ScoreMods& m) {
  return (m.softcap > 0.f ? static_cast<unsigned>(Feature::kSoftcap) : 0u) |
         (m.alibi_slopes != nullptr ? static_cast<unsigned>(Feature::kAlibi) : 0u) |
         (m.sinks != nullptr ? static_cast<unsigned>(Feature::kSinks) : 0u) |
         (m.bias != nullptr ? static_cast<unsigned>(Feature::kBias) : 0u);
}

unsigned feature_bits(const AttnFwdParams& params) {
  return feature_bits(params.mods) | (params.dropout.enabled() ? static_cast<unsigned>(Feature::kDropout) : 0u);
}

std::vector<int> FamilyCaps::all_head_dims() const {
  std::vector<int> all = fwd_head_dims;
  for (int d : bwd_head_dims) {
    if (!contains(all, d)) all.push_back(d);
  }
  std::sort(all.begin(), all.end());
  return all;
}

// The family's granularity, the same for both directions (no allocation: it runs per launch).
int FamilyCaps::bucket(int head_dim_qk, int head_dim_v) const {
  const int need = std::max(head_dim_qk, head_dim_v);
  int best = 0;
  for (const std::vector<int>* list : {&fwd_head_dims, &bwd_head_dims}) {
    for (int b : *list) {
      if (b >= need) {
        if (best == 0 || b < best) best = b;
        break;
      }
    }
  }
  return best;
}

TilePlan FamilyCaps::plan(Direction d, int bucket, int major, int smem_optin_bytes) const {
  const PlanFn fn = d == Direction::kForward ? fwd_plan : bwd_plan;
  return fn == nullptr ? TilePlan{-1, 0} : fn(bucket, major, smem_optin_bytes);
}

const std::vector<FamilyCaps>& families() {
  static const std::vector<FamilyCaps> table = make_families();
  return table;
}

std::string no_family_reason() {
  if (!families().empty()) return "";
  if (!build_config().with_cuda) return "flashsdpa._C was built without CUDA (no nvcc at build time)";
  return "this build compiled no kernel family (FLASHSDPA_FAMILIES)";
}

std::vector<std::string> family_reasons(const FamilyCaps& family, const Problem& problem, bool first) {
  std::vector<std::string> reasons;
  for (Check check : kChecks) {
    std::string why;
    if (!check(family, problem, &why)) {
      reasons.push_back(why);
      // Later checks assume the earlier ones: after a failed bucket or direction, stop.
      if (first || check == check_head_dims || check == check_direction) break;
    }
  }
  return reasons;
}

bool family_serves(const FamilyCaps& family, const Problem& problem) {
  for (Check check : kChecks) {
    if (!check(family, problem, nullptr)) return false;
  }
  return true;
}

const FamilyCaps* select_family(const Problem& problem, const FamilyCaps* after) {
  const std::vector<FamilyCaps>& table = families();
  for (size_t i = after == nullptr ? 0 : static_cast<size_t>(after - table.data()) + 1; i < table.size(); ++i) {
    if (family_serves(table[i], problem)) return &table[i];
  }
  return nullptr;
}

std::string refusal(const Problem& problem) {
  if (families().empty()) return no_family_reason();
  std::string out;
  for (const FamilyCaps& family : families()) {
    const std::vector<std::string> reasons = family_reasons(family, problem, true);
    out += (out.empty() ? "" : "; ") + std::string("family ") + family.name + ": " +
           (reasons.empty() ? std::string("serves it") : reasons.front());
  }
  return out;
}

}  // namespace flashsdpa
