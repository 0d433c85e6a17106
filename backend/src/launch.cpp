// launch.cpp: see launch.h.
#include "launch.h"

#include <array>
#include <string>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <type_traits>

#include "build_config.h"
#include "capabilities.h"
#include "flashsdpa/kernels.h"

#ifdef FLASHSDPA_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace flashsdpa {

#ifdef FLASHSDPA_WITH_CUDA
namespace {

void throw_on_error(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string("flashsdpa: ") + what + ": " + cudaGetErrorString(err));
}

// Sets `device` current for one scope and restores the caller's device after, so a launch on
// cuda:1 from a thread whose current device is cuda:0 runs on the right GPU and leaves no trace.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    throw_on_error(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) throw_on_error(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() {
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

constexpr int kMaxDevices = 64;

// The first family that runs on a device at all (device_info's report; problems pick their own).
std::string family_for(int major, int minor) {
  for (const FamilyCaps& f : families()) {
    if (major * 10 + minor >= f.min_capability && (f.max_capability == 0 || major * 10 + minor <= f.max_capability))
      return f.name;
  }
  return "";
}

// The number of visible devices, asked once: it is fixed when the CUDA runtime initializes
// (CUDA_VISIBLE_DEVICES is read then), and every launch checks its device against it. A failed
// query (no driver) is not cached: a static whose initializer throws is initialized again next time.
int visible_device_count() {
  static const int count = [] {
    int n = 0;
    throw_on_error(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
    return n;
  }();
  return count;
}

const DeviceInfo& cached_device_info(int device) {
  static std::array<DeviceInfo, kMaxDevices> infos;
  static std::array<std::once_flag, kMaxDevices> flags;
  const int count = visible_device_count();
  if (device < 0 || device >= count || device >= kMaxDevices)
    throw std::invalid_argument("device=" + std::to_string(device) + ": no such CUDA device (" +
                                std::to_string(count) + " visible)");
  std::call_once(flags[device], [&] {
    cudaDeviceProp prop{};
    throw_on_error(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    DeviceInfo& info = infos[device];
    info.name = prop.name;
    info.major = prop.major;
    info.minor = prop.minor;
    info.sms = prop.multiProcessorCount;
    info.smem_optin_bytes = prop.sharedMemPerBlockOptin;
    // FLASHSDPA_MAX_SMEM_PER_BLOCK=<bytes> makes a GPU look smaller: the tiles of parts with less
    // shared memory (sm_80: 163 KB, sm_86/89: 99 KB) then run, and are tested, on an H100/H200.
    if (const char* cap = std::getenv("FLASHSDPA_MAX_SMEM_PER_BLOCK")) {
      const long long bytes = std::atoll(cap);
      if (bytes > 0 && bytes < info.smem_optin_bytes) info.smem_optin_bytes = bytes;
    }
    info.family = family_for(prop.major, prop.minor);
  });
  return infos[device];
}

void set_device_facts(AttnFwdParams& params, const DeviceInfo& info) {
  params.num_sms = info.sms;
  params.cc_major = info.major;
  params.smem_optin_bytes = static_cast<int32_t>(info.smem_optin_bytes);
}

Problem problem_on(const DeviceInfo& info, DType dtype, int head_dim_qk, int head_dim_v, MaskKind mask, Layout layout,
                   Direction direction, bool deterministic = false, unsigned features = 0) {
  return Problem{info.major * 10 + info.minor, static_cast<int>(info.smem_optin_bytes), dtype, head_dim_qk, head_dim_v,
                 mask, layout, direction, deterministic, features};
}

// FLASHSDPA_FAMILY=<name> restricts every launch to that family (tests run each shape against
// each family; a problem it cannot take is then an error instead of a quiet fallback). Read once.
const char* forced_family() {
  static const char* family = std::getenv("FLASHSDPA_FAMILY");
  return family;
}

// A family's per-call hook for this direction's params: nullptr when it takes the call.
const char* unsupported(const FamilyCaps& f, const AttnFwdParams& params) {
  return f.fwd_unsupported != nullptr ? f.fwd_unsupported(params) : nullptr;
}
const char* unsupported(const FamilyCaps& f, const AttnBwdParams& params) {
  return f.bwd_unsupported != nullptr ? f.bwd_unsupported(params) : nullptr;
}
// A family's speed rule (capabilities.h's fwd_yields): why a later family runs this call faster.
const char* yields(const FamilyCaps& f, const AttnFwdParams& params) {
  return f.fwd_yields != nullptr && speed_rules_enabled() ? f.fwd_yields(params) : nullptr;
}
const char* yields(const FamilyCaps&, const AttnBwdParams&) { return nullptr; }

template <typename Params>
constexpr Direction direction_of() {
  return std::is_same<Params, AttnBwdParams>::value ? Direction::kBackward : Direction::kForward;
}

// The first family of the table that takes this call: its predicates (a handful of integer
// compares over a table of one or two rows) and its per-call hook for the direction. A taker whose
// speed rule yields hands the call to the next taker, if any (FLASHSDPA_FAMILY: never); `yielded`
// then gets the rule's reason.
template <typename Params>
const FamilyCaps* first_taker(const Problem& problem, const Params& params, const FamilyCaps* after, std::string* why,
                              std::string* yielded = nullptr) {
  for (const FamilyCaps* f = select_family(problem, after); f != nullptr; f = select_family(problem, f)) {
    if (forced_family() != nullptr && f->name != forced_family()) continue;
    const char* no = unsupported(*f, params);
    if (no == nullptr) {
      const char* rule = forced_family() == nullptr ? yields(*f, params) : nullptr;
      if (rule != nullptr) {
        if (const FamilyCaps* next = first_taker(problem, params, f, nullptr)) {
          if (yielded) *yielded = "family " + f->name + " yields: " + rule;
          return next;
        }
      }
      return f;
    }
    if (why) *why += "; family " + f->name + ": " + no;
  }
  return nullptr;
}

Problem problem_of(const DeviceInfo& info, const AttnFwdParams& params, Direction direction) {
  // The score modifiers are part of the problem: a family that does not list one (sm90 today)
  // fails check_features, so first_taker hands the call to the next row (sm80).
  return problem_on(info, params.dtype, params.head_dim_qk, params.head_dim_v, mask_kind(params.mask),
                    layout_of(params), direction, false, feature_bits(params));
}
Problem problem_of(const DeviceInfo& info, const AttnBwdParams& params, Direction direction) {
  return problem_on(info, params.dtype, params.head_dim_qk, params.head_dim_v, mask_kind(params.mask),
                    layout_of(params), direction, params.deterministic, feature_bits(params));
}

// What the params take from the family: its head-dim bucket and, for a backward, its tile and the
// dq_accum strides, which are delta's times the bucket (params.h).
void use_family(AttnFwdParams& params, const FamilyCaps& family) {
  params.head_dim_bucket = family.bucket(params.head_dim_qk, params.head_dim_v);
}
void use_family(AttnBwdParams& params, const FamilyCaps& family) {
  use_family(static_cast<AttnFwdParams&>(params), family);
  const int bucket = params.head_dim_bucket;
  params.bwd_tile = family.plan(Direction::kBackward, bucket, params.cc_major, params.smem_optin_bytes).tile;
  params.dq_accum_row_stride = params.delta_row_stride * bucket;
  params.dq_accum_head_stride = params.delta_head_stride * bucket;
  params.dq_accum_batch_stride = params.delta_batch_stride * bucket;
  // A family that adds every dQ tile (the portable one) needs the whole accumulator zeroed, also
  // when it takes a call the sm90 family declined after api.cpp set this for it.
  params.dq_first_store = family.dq_first_store && params.dq_semaphore != nullptr && params.mods.bias_cells == nullptr;
}

template <typename Params>
const FamilyCaps& plan(Params& params, int device, std::string* yielded = nullptr) {
  const DeviceInfo& info = cached_device_info(device);
  set_device_facts(params, info);
  const Problem problem = problem_of(info, params, direction_of<Params>());
  std::string why;
  const FamilyCaps* family = first_taker(problem, params, nullptr, &why, yielded);
  if (family == nullptr) {
    const char* forced = forced_family();
    throw std::invalid_argument("device " + std::to_string(device) + " (" + info.name + "): no kernel family " +
                                (forced ? std::string("(FLASHSDPA_FAMILY=") + forced + ") " : std::string()) +
                                "serves this call: " + refusal(problem) + why);
  }
  use_family(params, *family);
  return *family;
}

}  // namespace

DeviceInfo device_info(int device) { return cached_device_info(device); }

Selection select(int device, DType dtype, int head_dim_qk, int head_dim_v, MaskKind mask, Layout layout,
                 Direction direction, bool deterministic, unsigned features) {
  const DeviceInfo& info = cached_device_info(device);
  const Problem problem =
      problem_on(info, dtype, head_dim_qk, head_dim_v, mask, layout, direction, deterministic, features);
  Selection s;
  s.family = select_family(problem);
  // FLASHSDPA_FAMILY: the verdict names the family the launch will use (first_taker skips the others).
  while (s.family != nullptr && forced_family() != nullptr && s.family->name != forced_family())
    s.family = select_family(problem, s.family);
  if (s.family == nullptr) {
    s.reasons = refusal(problem);
    return s;
  }
  s.bucket = s.family->bucket(head_dim_qk, head_dim_v);
  s.tile = s.family->plan(direction, s.bucket, info.major, static_cast<int>(info.smem_optin_bytes));
  return s;
}

const FamilyCaps& plan_fwd(AttnFwdParams& params, int device, std::string* yielded) {
  return plan(params, device, yielded);
}
const FamilyCaps& plan_bwd(AttnBwdParams& params, int device) { return plan(params, device); }

void launch_fwd(const FamilyCaps& family, const AttnFwdParams& params, int device, void* stream) {
  DeviceGuard guard(device);
  if (params.num_splits > 0) {  // the table chose this family for Layout::kDecode: it has run_decode
    throw_on_error(static_cast<cudaError_t>(family.run_decode(params, stream)), "decode launch");
    return;
  }
  auto err = static_cast<cudaError_t>(family.run_fwd(params, stream));
  if (err == cudaErrorNotSupported && family.fwd_unsupported != nullptr) {
    // The driver refused a TMA descriptor before anything was launched: the next family takes it.
    const Problem problem = problem_of(cached_device_info(device), params, Direction::kForward);
    if (const FamilyCaps* next = first_taker(problem, params, &family, nullptr)) {
      AttnFwdParams next_params = params;
      use_family(next_params, *next);
      err = static_cast<cudaError_t>(next->run_fwd(next_params, stream));
    }
  }
  throw_on_error(err, "forward launch");
}

void launch_bwd(const FamilyCaps& family, const AttnBwdParams& params, int device, void* stream) {
  DeviceGuard guard(device);
  auto err = static_cast<cudaError_t>(family.run_bwd(params, stream));
  if (err == cudaErrorNotSupported && family.bwd_unsupported != nullptr) {
    // As in the forward: the driver refused a TMA descriptor before anything was launched. The workspace was sized for this family's bucket: the next family takes the call only if its
    // bucket is no larger (the portable family's buckets are finer than sm90's).
    const Problem problem = problem_of(cached_device_info(device), params, Direction::kBackward);
    const FamilyCaps* next = first_taker(problem, params, &family, nullptr);
    if (next != nullptr && next->bucket(params.head_dim_qk, params.head_dim_v) <= params.head_dim_bucket) {
      AttnBwdParams next_params = params;
      use_family(next_params, *next);
      err = static_cast<cudaError_t>(next->run_bwd(next_params, stream));
    }
  }
  throw_on_error(err, "backward launch");
}

void launch_bias_cells(const BiasCellsParams& params, int device, void* stream) {
  cached_device_info(device);  // the index check (cached after a device's first call)
  DeviceGuard guard(device);
  throw_on_error(static_cast<cudaError_t>(run_bias_cells(params, stream)), "bias_cells launch");
}

#else  // CPU-only build: the package imports and always falls back.

namespace {
[[noreturn]] void no_cuda() {
  throw std::runtime_error("flashsdpa._C was built without CUDA (no nvcc at build time)");
}
}  // namespace

DeviceInfo device_info(int) { no_cuda(); }
Selection select(int, DType, int, int, MaskKind, Layout, Direction, bool, unsigned) { no_cuda(); }
const FamilyCaps& plan_fwd(AttnFwdParams&, int, std::string*) { no_cuda(); }
const FamilyCaps& plan_bwd(AttnBwdParams&, int) { no_cuda(); }
void launch_fwd(const FamilyCaps&, const AttnFwdParams&, int, void*) { no_cuda(); }
void launch_bwd(const FamilyCaps&, const AttnBwdParams&, int, void*) { no_cuda(); }
void launch_bias_cells(const BiasCellsParams&, int, void*) { no_cuda(); }

#endif

}  // namespace flashsdpa
