// capabilities.h: what each kernel family can serve, in one table, and the serving rule as small
// predicates that each explain a refusal (PyTorch sdp_utils style). The host picks a family per
// (device, problem) with them (launch.cpp), checks.cpp asks them for device-independent limits,
// and _C exports both the table (flashsdpa.capabilities()) and the verdicts (Python's predicates
// cache them per problem), so the rule is written once.
#pragma once

#include <string>
#include <vector>

#include "flashsdpa/kernels.h"
#include "flashsdpa/params.h"

namespace flashsdpa {

// Spelled in Python as "none", "causal_top_left", "causal_bottom_right", "window".
enum class MaskKind : int { kNone = 0, kCausalTopLeft = 1, kCausalBottomRight = 2, kWindow = 3 };
// kDecode: the decode kernel (split-KV, GQA-packed; contiguous or paged K/V; params.num_splits >= 1).
enum class Layout : int { kDense = 0, kVarlen = 1, kDecode = 2 };
enum class Direction : int { kForward = 0, kBackward = 1 };

MaskKind mask_kind(const MaskSpec& mask);
// The layout of a call as the table sees it: decode (num_splits >= 1), varlen (cu_seqlens) or dense.
Layout layout_of(const AttnFwdParams& params);
const char* mask_kind_name(MaskKind kind);
const char* layout_name(Layout layout);  // "dense", "varlen", "decode"


// Issue 14's score modifiers, spelled "softcap", "alibi", "sinks", "bias" (an additive attn_mask);
// a problem asks for a bit set of them (Python's selection passes the same bits to _C.select).
// kDropout: dropout on P (params.h's DropoutSpec), served only without the other features (its
// kernels are instantiated beside the plain ones, not beside kMods: check_features).
enum class Feature : unsigned { kSoftcap = 1, kAlibi = 2, kSinks = 4, kBias = 8, kDropout = 16 };
constexpr int kAllFeatureBits = 31;
const char* feature_name(Feature f);
unsigned feature_bits(const ScoreMods& mods);
// The modifiers' bits and kDropout when the call drops out.
unsigned feature_bits(const AttnFwdParams& params);

using RunFwd = int (*)(const AttnFwdParams&, void*);
using RunBwd = int (*)(const AttnBwdParams&, void*);
using PlanFn = TilePlan (*)(int bucket, int major, int smem_optin_bytes);
using FwdUnsupportedFn = const char* (*)(const AttnFwdParams&);
using FwdWorkspaceFn = int64_t (*)(const AttnFwdParams&);
using BwdUnsupportedFn = const char* (*)(const AttnBwdParams&);
using DecodeTileFn = DecodeTile (*)(int bucket);

// A head-dim bucket that serves less than its family's row (the sm90 forward's 512: a kernel of
// its own, fwd512_kernel_sm90.cuh; the sm90 backward's 256: bwd_kernel_sm90.cuh's 64-key tile):
// in that bucket and direction a call may have only these layouts and Feature bits (and
// deterministic mode where it says so); every other bucket has the row's.
struct BucketLimits {
  int bucket;
  Direction direction;
  std::vector<Layout> layouts;
  unsigned features;   // Feature bits allowed
  std::string kernel;  // what serves the bucket, for the refusal's words
  // Whether its backward takes torch.use_deterministic_algorithms(True) calls where the row does
  // (the sm90 backward's 256 bucket adds dQ by float reductions in any order).
  bool deterministic = true;
};

struct FamilyCaps {
  std::string name;
  std::string runs_on;                  // the compute-capability rule, in words
  int min_capability;                   // major * 10 + minor
  int max_capability;                   // inclusive; 0 = no upper bound
  std::vector<int> archs;               // SASS targets compiled for it
  std::vector<std::string> dtypes;      // "float16", "bfloat16"
  // Compiled head-dim buckets per direction, ascending. A problem's bucket is the smallest bucket of
  // the family (either list) >= max(dqk, dv); a direction serves it only where its own list has it
  // (the sm90 backward, {64, 128}, refuses head dim 192 rather than running it in 256).
  std::vector<int> fwd_head_dims;
  std::vector<int> bwd_head_dims;
  std::vector<MaskKind> masks;
  std::vector<Layout> layouts;      // the forward's (and the decode path's)
  std::vector<Direction> directions;
  // Score modifiers it serves, per direction (a family's forward may serve one before its backward).
  std::vector<Feature> fwd_features;
  std::vector<Feature> bwd_features;
  RunFwd run_fwd;
  RunBwd run_bwd;    // nullptr without a backward
  PlanFn fwd_plan;
  PlanFn bwd_plan;   // nullptr without a backward
  // Per-call facts the table cannot express (pointer alignment for TMA, a negative scale):
  // nullptr when the family takes this call (or has no such facts), else why not (the launcher
  // then tries the next row).
  FwdUnsupportedFn fwd_unsupported;
  BwdUnsupportedFn bwd_unsupported;
  // The decode path (Layout::kDecode): its kernel and its tile per head-dim bucket; nullptr for a
  // family without one (its layouts then do not list kDecode).
  RunFwd run_decode = nullptr;
  DecodeTileFn decode_tile = nullptr;
  // Whether its backward is bitwise reproducible run to run (torch.use_deterministic_algorithms):
  // the sm90 family adds dQ tiles in a fixed order (params.dq_semaphore); the portable family's
  // float atomics land in any order.
  bool deterministic_backward = false;
  // Whether its backward stores each query block's first dQ tile (params.h's dq_first_store), so
  // the preprocess zeroes only the blocks no key block visits; it then gets the dQ semaphores
  // for every dense backward, not only deterministic ones.
  bool dq_first_store = false;

  // The backward's layouts (make_families sets them for every family; the sm90 family's backward
  // is dense only while its forward also takes varlen).
  std::vector<Layout> bwd_layouts;
  // The features its decode path (Layout::kDecode) takes: a subset of fwd_features, as the decode
  // kernel has its own instantiations (the sm80 family's: plain and kModsBias, the bias alone).
  // Empty: the decode path serves unmodified calls only.
  std::vector<Feature> decode_features;

  const std::vector<Layout>& layouts_of(Direction d) const { return d == Direction::kForward ? layouts : bwd_layouts; }

  const std::vector<int>& head_dims(Direction d) const { return d == Direction::kForward ? fwd_head_dims : bwd_head_dims; }
  const std::vector<Feature>& features(Direction d) const {
    return d == Direction::kForward ? fwd_features : bwd_features;
  }
  std::vector<int> all_head_dims() const;             // both directions' buckets, ascending
  int bucket(int head_dim_qk, int head_dim_v) const;  // 0: none large enough
  TilePlan plan(Direction d, int bucket, int major, int smem_optin_bytes) const;
  // The workspace a forward call can use (params filled, this family picked; params.h's workspace),
  // 0 = none; nullptr for a family whose forward takes none.
  FwdWorkspaceFn fwd_workspace = nullptr;
  // A speed rule, not a limit: nullptr when this family should run a forward it takes, else why a
  // later family of the table that also takes it is faster there (first_taker then hands it on;
  // with none, or with FLASHSDPA_FAMILY naming this family, it runs here). nullptr: never yields.
  FwdUnsupportedFn fwd_yields = nullptr;
  // Buckets with fewer capabilities than the row (check_bucket_limits reads them).
  std::vector<BucketLimits> bucket_limits;
};

// One call as the table sees it. capability 0: no device yet (checks.cpp), device rules skipped.
struct Problem {
  int capability;        // major * 10 + minor
  int smem_optin_bytes;
  DType dtype;
  int head_dim_qk, head_dim_v;
  MaskKind mask;
  Layout layout;
  Direction direction;
  bool deterministic = false;  // backward under torch.use_deterministic_algorithms(True)
  unsigned features = 0;  // Feature bits
};

// The compiled families, preferred first (an arch-specific family before the portable one).
const std::vector<FamilyCaps>& families();
// Why the table is empty (a CPU-only build), or "".
std::string no_family_reason();

// Every reason `family` cannot serve `problem` (empty: it can). With `first`, stops at one.
std::vector<std::string> family_reasons(const FamilyCaps& family, const Problem& problem, bool first = false);
// Whether `family` serves `problem` (every predicate passes); no strings built.
bool family_serves(const FamilyCaps& family, const Problem& problem);
// The first family that serves `problem` (after `after` in the table, when given), or nullptr.
const FamilyCaps* select_family(const Problem& problem, const FamilyCaps* after = nullptr);
// "family sm80: <reason>; family sm90: <reason>" for a problem select_family refused.
std::string refusal(const Problem& problem);

}  // namespace flashsdpa
