// routers.cpp: the C++ routers of PyTorch's two hot flash ops, aten::_scaled_dot_product_flash_attention
// and its _backward, on torch's stable ABI (libflashsdpa_routers, loaded by
// python/flashsdpa/cxx_routers.py; python/flashsdpa/routers.py holds the Python routers they stand
// in for, and the rules both follow).
//
// Why C++: a Python kernel at the CUDA key costs the dispatcher's boxing into Python plus a Python
// body with four or five Python-level allocations, 9 (forward) and 16 (backward) us on the CI CPU
// (docs/performance.md, "Budget"); the bar is +2 us over PyTorch's own kernel. Here a served call is
// the stable ABI's boxed call, attribute reads through the shim, the same allocations PyTorch's kernel
// makes and one call into _C's backend through its RouterTable.
//
// What it owns: the served path (the same predicates, outputs and launch arguments as routers.py's
// _sdpa_flash_forward / _sdpa_flash_backward), the per-op counters (memory owned by Python,
// incremented here), and run-time registration (a library handle created by enable() and deleted by
// the last release, so without flashsdpa PyTorch's kernels run untaxed). What it does not own:
// fallback. An unserved call goes, with its arguments untouched and a short reason, to the Python
// op flashsdpa::<op>_fallback (cxx_routers.py), which reports it and runs PyTorch's captured kernel
// exactly as the Python router does: the stable ABI has no way to call a kernel captured before
// registration.
//
// The masked ops (efficient attention, PyTorch's road for float32 and masked calls) are the
// exception: a float32 model's every attention call reaches them, and a Python kernel there costs
// ~17 us a forward and ~80 us a backward on autograd's device thread (docs/performance.md, session
// 19-20), against the 2 us. Their routers here serve nothing themselves: a call that can
// only be left to PyTorch (a float32 / float64 query, or no attn_bias: the Python router's first two
// reasons, so the verdict and the sentence agree) runs PyTorch's CUDA kernel through AOTInductor's
// C shim (aoti_torch_cuda__<op> in libtorch_cuda: at::cuda::<op>, the kernel itself, never the
// dispatcher, so ours is not re-entered), counted here with its reason; every other call takes
// the Python road (flashsdpa::<op>_fallback: routers_masked.py's router, which serves or falls back).
//
// No kernels here: _C's backend does every verdict and launch (flashsdpa/router_table.h).
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/c/shim.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/stableivalue_conversions.h>
#include <torch/csrc/stable/tensor.h>

#include "api.h"
#include "flashsdpa/router_table.h"

namespace {

using flashsdpa::RouterTable;
// The stable ABI's StableIValue conversions (spelled out: the global from/to of older headers would be ambiguous).
template <typename T>
StableIValue boxed(const T& value) {
  return torch::stable::detail::from(value);
}
template <typename T>
T unboxed(StableIValue value) {
  return torch::stable::detail::to<T>(value);
}

// ---- state set by flashsdpa_routers_init ----------------------------------------------------------

const RouterTable* g_table = nullptr;
// Counters in memory Python owns (reporting.py's and routers.ROUTED): [0] the forward calls a router
// saw, then [served, fallback] per op. Served counts are bumped here; fallbacks by the Python
// fallback op.
int64_t* g_routed = nullptr;
int64_t* g_fwd_counts = nullptr;
int64_t* g_bwd_counts = nullptr;
TorchLibraryHandle g_library = nullptr;

// The current CUDA stream. aoti_torch_get_current_cuda_stream is part of the stable C shim but lives
// in libtorch_cuda, which a CPU-only torch lacks; resolved at init (dlsym on the loaded library) so
// that this library also loads, and its registration can be tested, against a CPU-only torch.
using CurrentStreamFn = AOTITorchError (*)(int32_t, void**);
CurrentStreamFn g_current_stream = nullptr;

// torch.are_deterministic_algorithms_enabled(). The one fact the routers need that the stable ABI
// (2.11 to 2.13) has no accessor for; the backward must know it (a deterministic family of ours, or
// PyTorch's kernel, which raises or warns as the flag says). at::globalContext() and
// Context::deterministicAlgorithms() are plain exported functions of libtorch_cpu, unchanged since
// torch 1.8; they are resolved by name at init, so a torch without them loads this library and keeps
// the Python routers (init says why) instead of failing. A non-virtual member function called through
// a plain pointer with `this` first is the Itanium C++ ABI's calling convention for it.
using GlobalContextFn = const void* (*)();
using DeterministicFn = bool (*)(const void*);
GlobalContextFn g_global_context = nullptr;
DeterministicFn g_deterministic = nullptr;

bool deterministic_algorithms() { return g_deterministic(g_global_context()); }

void bump(int64_t* counter) { __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED); }

// torch's dtype and device codes, asked once (they are functions of the shim, not constants).
int32_t g_float16 = 0, g_bfloat16 = 0, g_float32 = 0, g_float64 = 0, g_uint8 = 0, g_uint64 = 0, g_cuda = 0;

void check(AOTITorchError err, const char* what) {
  if (err != AOTI_TORCH_SUCCESS) throw std::runtime_error(std::string("flashsdpa: ") + what + " failed");
}

// ---- tensors --------------------------------------------------------------------------------------

// The facts of one argument, read through the shim without taking ownership of its handle (an
// unserved call hands the handle on untouched).
struct Facts {
  AtenTensorHandle handle = nullptr;
  int64_t dim = 0;
  const int64_t* sizes = nullptr;
  const int64_t* strides = nullptr;
  int64_t offset = 0;
  int32_t dtype = 0, device_type = 0, device = -1;

  explicit Facts(StableIValue value) : handle(unboxed<AtenTensorHandle>(value)) {
    int64_t *sz = nullptr, *st = nullptr;
    check(aoti_torch_get_dim(handle, &dim), "get_dim");
    check(aoti_torch_get_sizes(handle, &sz), "get_sizes");
    check(aoti_torch_get_strides(handle, &st), "get_strides");
    check(aoti_torch_get_storage_offset(handle, &offset), "get_storage_offset");
    check(aoti_torch_get_dtype(handle, &dtype), "get_dtype");
    check(aoti_torch_get_device_type(handle, &device_type), "get_device_type");
    check(aoti_torch_get_device_index(handle, &device), "get_device_index");
    sizes = sz, strides = st;
  }
  void* data() const {
    void* p = nullptr;
    check(aoti_torch_get_data_ptr(handle, &p), "get_data_ptr");
    return p;
  }
  flashsdpa::Strides rows() const { return {strides[0], strides[1], strides[2]}; }  // (batch, head, row)
};

bool defined(StableIValue value) {
  bool is_defined = false;
  check(aoti_torch_is_defined(unboxed<AtenTensorHandle>(value), &is_defined), "is_defined");
  return is_defined;
}

// An owned tensor handle: deleted on scope exit unless released into the output stack.
class Owned {
 public:
  Owned() = default;
  explicit Owned(AtenTensorHandle h) : h_(h) {}
  Owned(Owned&& o) noexcept : h_(o.h_) { o.h_ = nullptr; }
  Owned& operator=(Owned&& o) noexcept {
    reset();
    h_ = o.h_, o.h_ = nullptr;
    return *this;
  }
  ~Owned() { reset(); }
  AtenTensorHandle get() const { return h_; }
  StableIValue release() {
    const StableIValue v = boxed(h_);
    h_ = nullptr;
    return v;
  }
  void* data() const {
    void* p = nullptr;
    check(aoti_torch_get_data_ptr(h_, &p), "get_data_ptr");
    return p;
  }
  flashsdpa::Strides rows() const {
    int64_t* st = nullptr;
    check(aoti_torch_get_strides(h_, &st), "get_strides");
    return {st[0], st[1], st[2]};
  }

 private:
  void reset() {
    if (h_ != nullptr) aoti_torch_delete_tensor_object(h_);
    h_ = nullptr;
  }
  AtenTensorHandle h_ = nullptr;
};

Owned empty_strided(int64_t dim, const int64_t* sizes, const int64_t* strides, int32_t dtype, int32_t device) {
  AtenTensorHandle h = nullptr;
  check(aoti_torch_empty_strided(dim, sizes, strides, dtype, g_cuda, device, &h), "empty_strided");
  return Owned(h);
}

Owned empty_contiguous(std::initializer_list<int64_t> sizes, int32_t dtype, int32_t device) {
  std::array<int64_t, 4> sz{}, st{};
  const int64_t dim = static_cast<int64_t>(sizes.size());
  std::copy(sizes.begin(), sizes.end(), sz.begin());
  int64_t stride = 1;
  for (int64_t d = dim - 1; d >= 0; --d) st[d] = stride, stride *= sz[d];
  return empty_strided(dim, sz.data(), st.data(), dtype, device);
}

// Whether a tensor's elements tile its memory exactly under some permutation of its dims (c10's
// is_non_overlapping_and_dense): then torch.empty_like keeps its strides exactly.
bool non_overlapping_and_dense(const Facts& t) {
  std::array<int64_t, 8> perm{};
  const int64_t n = t.dim;
  if (n > static_cast<int64_t>(perm.size())) return false;
  // Dims by ascending stride, those of size < 2 last (their stride is free): an insertion sort of at
  // most 8 entries.
  const auto before = [&](int64_t a, int64_t b) {
    if (t.sizes[a] < 2) return false;
    return t.sizes[b] < 2 || t.strides[a] < t.strides[b];
  };
  for (int64_t i = 0; i < n; ++i) {
    int64_t j = i;
    for (; j > 0 && before(i, perm[j - 1]); --j) perm[j] = perm[j - 1];
    perm[j] = i;
  }
  int64_t expected = 1;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = perm[i];
    if (t.sizes[d] < 2) return true;
    if (t.strides[d] != expected) return false;
    expected *= t.sizes[d];
  }
  return true;
}

// torch.empty_like(t): the same strides where t is non-overlapping and dense (every tensor SDPA's
// flash path passes: its (B, S, H, D) -> (B, H, S, D) transposes are), else torch's own empty_like,
// through the dispatcher (a few us, but exact).
Owned empty_like(const Facts& t) {
  if (non_overlapping_and_dense(t)) return empty_strided(t.dim, t.sizes, t.strides, t.dtype, t.device);
  AtenTensorHandle alias = nullptr;
  check(aoti_torch_new_tensor_handle(t.handle, &alias), "new_tensor_handle");
  torch::stable::Tensor like = torch::stable::empty_like(torch::stable::Tensor(alias));
  AtenTensorHandle h = nullptr;
  check(aoti_torch_new_tensor_handle(like.get(), &h), "new_tensor_handle");
  return Owned(h);
}

// ---- the dense predicate: selection.dense_ok ------------------------------------------------------

int dtype_code(int32_t dtype) { return dtype == g_float16 ? 0 : dtype == g_bfloat16 ? 1 : -1; }

// Per-device verdicts, cached (_backend._DEVICE_OK): 0 not asked yet, 1 no, 2 yes.
constexpr int kMaxDevices = 64;
std::array<std::atomic<int8_t>, kMaxDevices> g_device_ok{};

bool device_ok(int32_t device) {
  if (device < 0 || device >= kMaxDevices) return false;
  int8_t ok = g_device_ok[device].load(std::memory_order_relaxed);
  if (ok == 0) {
    ok = static_cast<int8_t>(1 + g_table->device_ok(device));
    g_device_ok[device].store(ok, std::memory_order_relaxed);
  }
  return ok == 2;
}

// Rows start on 16-byte boundaries (cp.async): strides and offset multiples of 8 two-byte elements.
bool rows_aligned(const Facts& t) { return ((t.strides[0] | t.strides[1] | t.strides[2] | t.offset) & 7) == 0; }
bool head_dim_ok(int64_t d) { return d >= 8 && d <= g_table->max_head_dim && d % 8 == 0; }

// Why our kernels cannot run on these (B, H, S, D) views as they are, in a few words, or nullptr. The
// full sentence is selection.dense_reason's: the fallback op asks it (cxx_routers.py).
const char* dense_refusal(const Facts& q, const Facts& k, const Facts& v) {
  const int code = dtype_code(q.dtype);
  if (code < 0 || !(g_table->dtype_bits >> code & 1u) || k.dtype != q.dtype || v.dtype != q.dtype)
    return "dtype: no compiled kernel";
  if (q.device_type != g_cuda || k.device_type != g_cuda || v.device_type != g_cuda) return "device: not CUDA";
  if (q.dim != 4 || k.dim != 4 || v.dim != 4) return "shape: needs 4 dims";
  const int64_t batch = q.sizes[0], heads_q = q.sizes[1], heads_kv = k.sizes[1], seqlen_k = k.sizes[2];
  if (batch != k.sizes[0] || batch != v.sizes[0] || heads_kv != v.sizes[1] || seqlen_k != v.sizes[2] ||
      q.sizes[3] != k.sizes[3] || heads_kv == 0 || heads_q % heads_kv != 0 || batch == 0 || heads_q == 0 ||
      q.sizes[2] == 0 || seqlen_k == 0)
    return "shape: sizes disagree or are empty";
  if (!head_dim_ok(q.sizes[3]) || !head_dim_ok(v.sizes[3])) return "head dims: no compiled bucket";
  if (q.strides[3] != 1 || k.strides[3] != 1 || v.strides[3] != 1 || !rows_aligned(q) || !rows_aligned(k) ||
      !rows_aligned(v))
    return "layout: rows not unit-stride and 16-byte aligned";
  if (k.device != q.device || v.device != q.device) return "device: tensors on different GPUs";
  if (!device_ok(q.device)) return "device: no kernel family runs on this GPU";
  return nullptr;
}

// _C.select's bucket per problem, cached (the Python routers' _backend.select cache).
std::mutex g_select_mutex;
std::unordered_map<uint64_t, int> g_select;

int select_bucket(int device, int dtype, int64_t head_dim_qk, int64_t head_dim_v, int mask_kind, int backward) {
  const uint64_t key = uint64_t(device) << 40 | uint64_t(dtype) << 36 | uint64_t(head_dim_qk) << 24 |
                       uint64_t(head_dim_v) << 12 | uint64_t(mask_kind) << 4 | uint64_t(backward);
  {
    std::lock_guard<std::mutex> lock(g_select_mutex);
    auto it = g_select.find(key);
    if (it != g_select.end()) return it->second;
  }
  const int bucket = g_table->select_bucket(device, dtype, static_cast<int>(head_dim_qk), static_cast<int>(head_dim_v),
                                            mask_kind, 0, backward);
  std::lock_guard<std::mutex> lock(g_select_mutex);
  g_select.emplace(key, bucket);
  return bucket;
}

// The decode plan per shape, cached and bounded as _backend.decode_plan's (a decode loop grows
// seqlen_k by one a step: a new key each call).
struct DecodePlan {
  int32_t splits;
  int64_t o_bytes, lse_bytes;
};
struct DecodeKey {
  std::array<int32_t, 10> v;
  bool operator==(const DecodeKey& o) const { return v == o.v; }
};
struct DecodeKeyHash {
  size_t operator()(const DecodeKey& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int32_t x : k.v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};
constexpr size_t kDecodeCacheSize = 4096;
std::mutex g_decode_mutex;
std::unordered_map<DecodeKey, std::optional<DecodePlan>, DecodeKeyHash> g_decode;

std::optional<DecodePlan> decode_plan(int device, int dtype, const std::array<int32_t, 7>& sizes, int mask_kind) {
  DecodeKey key{{device, dtype, mask_kind, sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5], sizes[6]}};
  {
    std::lock_guard<std::mutex> lock(g_decode_mutex);
    auto it = g_decode.find(key);
    if (it != g_decode.end()) return it->second;
  }
  DecodePlan plan{};
  std::optional<DecodePlan> found;
  if (g_table->decode_plan(device, dtype, sizes.data(), mask_kind, &plan.splits, &plan.o_bytes, &plan.lse_bytes))
    found = plan;
  std::lock_guard<std::mutex> lock(g_decode_mutex);
  if (g_decode.size() >= kDecodeCacheSize) g_decode.clear();
  g_decode.emplace(key, found);
  return found;
}

// ---- fallback -------------------------------------------------------------------------------------

// The error PyTorch's kernel raised inside the Python fallback op, set by it on this thread through
// flashsdpa_routers_fail (it returns placeholder outputs rather than raising: an exception raised
// through torch_call_dispatcher would come back as a bare error code, and torch 2.11 logs it).
thread_local std::string t_fallback_error;
thread_local bool t_fallback_failed = false;

// Hand the call to flashsdpa::<op>_fallback: the schema of the aten op plus `str reason` last, so the
// stack is our arguments exactly as the dispatcher gave them (their ownership moves on) and the
// reason. Its outputs become ours: output i is its return order[i] (cxx_routers.RETURN_ORDER: its
// returns are reordered so torch_call_dispatcher converts them right). `tensor_returns`: which of
// its returns are tensors (freed on failure).
template <size_t N, size_t M>
void fall_back(const char* fallback_op, StableIValue* stack, uint64_t num_args, uint64_t num_outputs,
               const char* reason, const std::array<int, N>& order, const std::array<int, M>& tensor_returns) {
  std::array<StableIValue, 24> call{};
  if (num_args + 1 > call.size() || num_outputs > call.size()) throw std::runtime_error("flashsdpa: stack too large");
  std::memcpy(call.data(), stack, num_args * sizeof(StableIValue));
  call[num_args] = boxed(std::string(reason));
  t_fallback_failed = false;
  if (torch_call_dispatcher(fallback_op, "", call.data(), TORCH_ABI_VERSION) != AOTI_TORCH_SUCCESS)
    throw std::runtime_error(std::string("flashsdpa: ") + fallback_op + " failed (" + reason + ")");
  if (t_fallback_failed) {
    for (int i : tensor_returns) aoti_torch_delete_tensor_object(unboxed<AtenTensorHandle>(call[i]));
    throw std::runtime_error(t_fallback_error);
  }
  if (num_outputs != N) throw std::runtime_error("flashsdpa: the fallback's returns do not match the op's");
  for (size_t i = 0; i < N; ++i) stack[i] = call[order[i]];
}

// ---- launches -------------------------------------------------------------------------------------

void* current_stream(int32_t device) {
  if (g_current_stream == nullptr) throw std::runtime_error("flashsdpa: this torch has no CUDA stream shim");
  void* stream = nullptr;
  check(g_current_stream(device, &stream), "get_current_cuda_stream");
  return stream;
}

// SDPA's is_causal reaches the op only for square calls, where PyTorch's kernel aligns it
// bottom-right (routers._SDPA_MASKS).
flashsdpa::MaskSpec sdpa_mask(bool is_causal) {
  return is_causal ? flashsdpa::MaskSpec{-1, 0, flashsdpa::MaskAlign::kBottomRight}
                   : flashsdpa::MaskSpec{-1, -1, flashsdpa::MaskAlign::kTopLeft};
}
int mask_kind(bool is_causal) { return is_causal ? 2 : 0; }  // capabilities.h's MaskKind

// routers.softmax_scale: the given scale, else 1/sqrt(head dim).
float softmax_scale(const std::optional<double>& scale, int64_t head_dim) {
  return static_cast<float>(scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim)));
}

flashsdpa::TensorArg arg(const Facts& t) { return {reinterpret_cast<uintptr_t>(t.data()), t.rows()}; }
flashsdpa::TensorArg arg(const Owned& t) { return {reinterpret_cast<uintptr_t>(t.data()), t.rows()}; }

// _backend._spec for dense (B, H, S, D) views.
flashsdpa::FwdSpec dense_spec(const Facts& q, const Facts& k, const Facts& v, const flashsdpa::TensorArg& out,
                              const flashsdpa::TensorArg& lse, float scale, bool is_causal) {
  flashsdpa::FwdSpec s{};
  s.q = arg(q), s.k = arg(k), s.v = arg(v), s.out = out, s.lse = lse;
  s.shape = {static_cast<int32_t>(q.sizes[0]), static_cast<int32_t>(q.sizes[1]), static_cast<int32_t>(k.sizes[1]),
             static_cast<int32_t>(q.sizes[2]), static_cast<int32_t>(k.sizes[2]), static_cast<int32_t>(q.sizes[3]),
             static_cast<int32_t>(v.sizes[3])};
  s.varlen = {0, 0, 0, -1, -1};
  s.mask = sdpa_mask(is_causal);
  s.scale = scale;
  s.dtype = dtype_code(q.dtype);
  s.device = q.device;
  s.stream = reinterpret_cast<uintptr_t>(current_stream(q.device));
  return s;
}

void launched(int failed, const char* error) {
  if (failed) throw std::runtime_error(error);
}

// _backend.launch_fwd: the decode kernel for up to decode_max_seqlen_q query rows where the table
// has one (its split workspace from the caching allocator, held until the launch is queued), else
// the forward kernel with the workspace it takes (the sm90 family's dynamic schedule for causal
// calls, its split tail for unmasked ones; from the caching allocator, held until the launch is queued).
void launch_fwd(flashsdpa::FwdSpec& spec, bool is_causal) {
  char error[512] = {0};
  Owned workspace;
  if (spec.shape.seqlen_q > g_table->decode_max_seqlen_q) {
    if (const int64_t bytes = g_table->fwd_workspace_bytes(&spec); bytes > 0) {
      workspace = empty_contiguous({bytes}, g_uint8, spec.device);
      spec.workspace = reinterpret_cast<uintptr_t>(workspace.data());
      spec.workspace_bytes = bytes;
    }
  } else {
    const auto& sh = spec.shape;
    const std::array<int32_t, 7> sizes{sh.batch, sh.heads_q, sh.heads_kv, sh.seqlen_q, sh.seqlen_k,
                                       sh.head_dim_qk, sh.head_dim_v};
    if (const auto plan = decode_plan(spec.device, spec.dtype, sizes, mask_kind(is_causal))) {
      uintptr_t o_ptr = 0, lse_ptr = 0;
      if (plan->splits > 1) {
        const int64_t o_padded = (plan->o_bytes + 255) / 256 * 256;
        workspace = empty_contiguous({o_padded + plan->lse_bytes}, g_uint8, spec.device);
        o_ptr = reinterpret_cast<uintptr_t>(workspace.data());
        lse_ptr = o_ptr + o_padded;
      }
      spec.decode = {plan->splits, o_ptr, lse_ptr, plan->o_bytes, plan->lse_bytes, 0, 0, 0, 0};
    }
  }
  launched(g_table->fwd(&spec, error, sizeof error), error);
}

// ---- the outputs' meta contract: routers._unused_outputs -------------------------------------------

// The zero-element debug mask, one per (device, dtype code), shared by every call (no memory to
// alias); created on first use and kept for the process (freed at exit, it could outlive torch).
std::mutex g_debug_mask_mutex;
std::array<std::array<AtenTensorHandle, 2>, kMaxDevices> g_debug_masks{};

StableIValue debug_mask(const Facts& q) {
  const int code = dtype_code(q.dtype);
  AtenTensorHandle shared = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_debug_mask_mutex);
    AtenTensorHandle& slot = g_debug_masks[q.device][code];
    if (slot == nullptr) {
      const int64_t zero = 0, one = 1;
      check(aoti_torch_empty_strided(1, &zero, &one, q.dtype, g_cuda, q.device, &slot), "empty_strided");
    }
    shared = slot;
  }
  AtenTensorHandle h = nullptr;
  check(aoti_torch_new_tensor_handle(shared, &h), "new_tensor_handle");
  return boxed(h);
}

StableIValue undefined_tensor() {
  AtenTensorHandle h = nullptr;
  check(aoti_torch_new_uninitialized_tensor(&h), "new_uninitialized_tensor");
  return boxed(h);
}

// ---- the routers ----------------------------------------------------------------------------------

constexpr const char* kDropoutReason = "dropout_p != 0";
constexpr const char* kDebugMaskReason = "return_debug_mask=True";

// aten::_scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal,
// return_debug_mask, *, scale) -> (output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, rng_state,
// unused, debug_attn_mask). routers._sdpa_flash_forward, step for step.
void sdpa_flash_forward(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
  bump(g_routed);
  const double dropout_p = unboxed<double>(stack[3]);
  const bool is_causal = unboxed<bool>(stack[4]);
  const bool return_debug_mask = unboxed<bool>(stack[5]);
  const Facts q(stack[0]), k(stack[1]), v(stack[2]);
  const char* reason = dropout_p != 0.0 ? kDropoutReason : return_debug_mask ? kDebugMaskReason : dense_refusal(q, k, v);
  if (reason == nullptr && v.sizes[3] != q.sizes[3]) reason = "value head_dim differs from query's";
  if (reason != nullptr) {
    fall_back("flashsdpa::_scaled_dot_product_flash_attention_fallback", stack, num_args, num_outputs, reason,
              std::array<int, 9>{0, 1, 2, 4, 3, 5, 6, 7, 8}, std::array<int, 7>{0, 1, 2, 4, 6, 7, 8});
    return;
  }
  // Served: the arguments are ours to release now.
  const Owned query(q.handle), key(k.handle), value(v.handle);
  const std::optional<double> scale = unboxed<std::optional<double>>(stack[6]);
  Owned out = empty_like(q);
  Owned lse = empty_contiguous({q.sizes[0], q.sizes[1], q.sizes[2]}, g_float32, q.device);
  flashsdpa::FwdSpec spec = dense_spec(q, k, v, arg(out), arg(lse), softmax_scale(scale, q.sizes[3]), is_causal);
  launch_fwd(spec, is_causal);
  // rng_state uint64[2] and the philox offset uint64[]: nothing reads them with dropout 0 (PyTorch's
  // kernel leaves them uninitialized too); fresh each call, since graphs may recycle dead outputs.
  Owned rng_state = empty_contiguous({2}, g_uint64, q.device);
  Owned unused = empty_contiguous({}, g_uint64, q.device);
  stack[0] = out.release();
  stack[1] = lse.release();
  stack[2] = undefined_tensor();
  stack[3] = undefined_tensor();
  stack[4] = boxed(q.sizes[2]);
  stack[5] = boxed(k.sizes[2]);
  stack[6] = rng_state.release();
  stack[7] = unused.release();
  stack[8] = debug_mask(q);
  bump(&g_fwd_counts[0]);
}

// routers._bwd_tensors_reason: out and grad_out shaped like the forward's output, the LSE float32
// (B, H, Sq), out readable in place, and a backward tile that fits the GPU (_backend.backward_reason).
const char* bwd_tensors_refusal(const Facts& grad_out, const Facts& out, const Facts& lse, const Facts& q,
                                const Facts& v) {
  const auto shaped_like_output = [&](const Facts& t) {
    return t.dim == 4 && t.sizes[0] == q.sizes[0] && t.sizes[1] == q.sizes[1] && t.sizes[2] == q.sizes[2] &&
           t.sizes[3] == v.sizes[3];
  };
  if (out.dtype != q.dtype || !shaped_like_output(out) || !shaped_like_output(grad_out))
    return "out / grad_out: not shaped like the forward's output";
  if (lse.dtype != g_float32 || lse.dim != 3 || lse.sizes[0] != q.sizes[0] || lse.sizes[1] != q.sizes[1] ||
      lse.sizes[2] != q.sizes[2])
    return "logsumexp: needs (B, H, Sq) float32";
  if (out.strides[3] != 1 || !rows_aligned(out)) return "out: rows not unit-stride and 16-byte aligned";
  // The table's verdict for the backward at these head dims (any compiled dtype: tiles do not depend on it).
  const int any_dtype = (g_table->dtype_bits & 1u) ? 0 : 1;
  if (select_bucket(q.device, any_dtype, q.sizes[3], v.sizes[3], 0, 1) == 0)
    return "backward: no tile fits this GPU's shared memory";
  return nullptr;
}

// _backend.deterministic_reason: under torch.use_deterministic_algorithms(True), a family of ours
// whose backward is bitwise reproducible, else PyTorch's kernel.
const char* deterministic_refusal(const Facts& q, const Facts& v, bool is_causal) {
  if (!deterministic_algorithms()) return nullptr;
  if (select_bucket(q.device, dtype_code(q.dtype), q.sizes[3], v.sizes[3], mask_kind(is_causal), 2) != 0) return nullptr;
  return "torch.use_deterministic_algorithms(True): no deterministic backward of ours";
}

// _backend.aligned_rows: grad_out itself if its rows have unit stride and start on 16-byte boundaries,
// else a contiguous copy, held by `copy` (autograd's grad of out.sum() has stride 0 everywhere).
flashsdpa::TensorArg aligned_rows(const Facts& t, Owned& copy) {
  if (t.strides[3] == 1 && rows_aligned(t)) return arg(t);
  copy = empty_contiguous({t.sizes[0], t.sizes[1], t.sizes[2], t.sizes[3]}, t.dtype, t.device);
  check(aoti_torch_copy_(copy.get(), t.handle, 0), "copy_");
  return arg(copy);
}

// aten::_scaled_dot_product_flash_attention_backward(grad_out, query, key, value, out, logsumexp,
// cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale)
// -> (grad_query, grad_key, grad_value). routers._sdpa_flash_backward, step for step.
void sdpa_flash_backward(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
  const double dropout_p = unboxed<double>(stack[10]);
  const bool is_causal = unboxed<bool>(stack[11]);
  const char* reason = nullptr;
  std::optional<Facts> g, q, k, v, o, lse;
  if (dropout_p != 0.0) {
    reason = kDropoutReason;
  } else if (defined(stack[6]) || defined(stack[7])) {
    reason = "cum_seq_q / cum_seq_k given";
  } else {
    g.emplace(stack[0]), q.emplace(stack[1]), k.emplace(stack[2]), v.emplace(stack[3]);
    o.emplace(stack[4]), lse.emplace(stack[5]);
    reason = dense_refusal(*q, *k, *v);
    if (reason == nullptr) reason = bwd_tensors_refusal(*g, *o, *lse, *q, *v);
    if (reason == nullptr) reason = deterministic_refusal(*q, *v, is_causal);
  }
  if (reason != nullptr) {
    fall_back("flashsdpa::_scaled_dot_product_flash_attention_backward_fallback", stack, num_args, num_outputs,
              reason, std::array<int, 3>{0, 1, 2}, std::array<int, 3>{0, 1, 2});
    return;
  }
  // Served: every argument is ours to release now (cum_seq_*, philox_* are undefined or unused).
  std::array<Owned, 8> args;
  for (int i : {0, 1, 2, 3, 4, 5, 6, 7}) args[i] = Owned(unboxed<AtenTensorHandle>(stack[i]));
  const Owned seed(unboxed<AtenTensorHandle>(stack[12])), offset(unboxed<AtenTensorHandle>(stack[13]));
  const std::optional<double> scale = unboxed<std::optional<double>>(stack[14]);
  Owned dq = empty_like(*q), dk = empty_like(*k), dv = empty_like(*v);
  Owned dout_copy;
  // The forward's spec with the saved out and LSE, then the gradients and the workspace (_backend.launch_bwd).
  flashsdpa::BwdSpec spec{};
  spec.dout = aligned_rows(*g, dout_copy);
  spec.fwd = dense_spec(*q, *k, *v, arg(*o), arg(*lse), softmax_scale(scale, q->sizes[3]), is_causal);
  const int dtype = spec.fwd.dtype;
  const bool deterministic = deterministic_algorithms();  // a family of ours has it: checked above
  const int bucket =
      select_bucket(q->device, dtype, q->sizes[3], v->sizes[3], mask_kind(is_causal), deterministic ? 2 : 1);
  int64_t dq_accum_bytes = 0, delta_bytes = 0;
  g_table->workspace_bytes(&spec.fwd.shape, -1, bucket, &dq_accum_bytes, &delta_bytes);
  const Owned dq_accum = empty_contiguous({dq_accum_bytes}, g_uint8, q->device);
  const Owned delta = empty_contiguous({delta_bytes}, g_uint8, q->device);
  spec.dq = arg(dq), spec.dk = arg(dk), spec.dv = arg(dv);
  spec.workspace = {reinterpret_cast<uintptr_t>(dq_accum.data()), dq_accum_bytes,
                    reinterpret_cast<uintptr_t>(delta.data()), delta_bytes};
  spec.deterministic = deterministic;
  char error[512] = {0};
  launched(g_table->bwd(&spec, error, sizeof error), error);
  stack[0] = dq.release();
  stack[1] = dk.release();
  stack[2] = dv.release();
  bump(&g_bwd_counts[0]);
}

// ---- the masked ops: PyTorch's kernel without Python for the calls only it takes --------------------

// aoti_torch_cuda__scaled_dot_product_efficient_attention[_backward]: AOTInductor's C shim of the
// op's CUDA kernel (libtorch_cuda; the signatures of torch 2.11 to 2.13's c_shim_cuda.h, which
// AOTInductor keeps: a changed signature gets a new, suffixed name, so an old name keeps its
// arguments; the aten ops' own schemas are checked by routers.routable before registration).
// Resolved at init; absent (a CPU-only torch), the masked routers are not registered here.
using EffFwdFn = AOTITorchError (*)(AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, AtenTensorHandle*, int32_t,
                                    double, int32_t, double*, AtenTensorHandle*, AtenTensorHandle*, AtenTensorHandle*,
                                    AtenTensorHandle*);
using EffBwdFn = AOTITorchError (*)(AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, AtenTensorHandle,
                                    AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, AtenTensorHandle,
                                    AtenTensorHandle, double, const int32_t*, int64_t, int32_t, double*,
                                    AtenTensorHandle*, AtenTensorHandle*, AtenTensorHandle*, AtenTensorHandle*);
EffFwdFn g_eff_fwd_native = nullptr;
EffBwdFn g_eff_bwd_native = nullptr;

// Set by flashsdpa_routers_init_masked: the two ops' [served, fallback] counts, the per-reason counts
// of the calls run natively here ([op][reason], reporting.native_reason_cells; Python folds them into
// stats()' fallback_reasons), and a flag Python raises while every fallback must reach Python (the
// DEBUG log, the opt-in FallbackWarning).
int64_t* g_eff_fwd_counts = nullptr;
int64_t* g_eff_bwd_counts = nullptr;
int64_t* g_native_reasons = nullptr;
const int64_t* g_report_each_call = nullptr;

// The reasons a masked call can only be PyTorch's, in routers_masked.NATIVE_REASONS' order.
enum NativeReason : int { kFloat32 = 0, kFloat64 = 1, kNoBias = 2, kNativeReasons = 3 };

// An optional argument, read without taking it: the stable ABI boxes `T?` as a pointer to a
// StableIValue, or null for None. The box stays the stack's until consume_optional_*.
const StableIValue* optional_box(StableIValue value) {
  return reinterpret_cast<const StableIValue*>(static_cast<uintptr_t>(value));
}
AtenTensorHandle peek_optional_tensor(StableIValue value) {
  const StableIValue* box = optional_box(value);
  return box == nullptr ? nullptr : unboxed<AtenTensorHandle>(*box);
}
std::optional<double> peek_optional_double(StableIValue value) {
  const StableIValue* box = optional_box(value);
  return box == nullptr ? std::nullopt : std::optional<double>(unboxed<double>(*box));
}
// Free an optional argument's box (and the tensor in it) once the call no longer needs it.
void consume_optional_tensor(StableIValue value) {
  if (const std::optional<AtenTensorHandle> h = unboxed<std::optional<AtenTensorHandle>>(value)) {
    aoti_torch_delete_tensor_object(*h);
  }
}
void consume_optional_double(StableIValue value) { (void)unboxed<std::optional<double>>(value); }

// The native reason of a masked call (bias: attn_bias, null or undefined; query: its handle), or -1
// when the Python router must decide. The order is routers_masked.eff_forward_reason's first two
// checks: the query's dtype (a float32 model's calls, masked or not), then no attn_bias.
int native_reason(AtenTensorHandle bias, AtenTensorHandle query) {
  int32_t dtype = 0;
  check(aoti_torch_get_dtype(query, &dtype), "get_dtype");
  if (dtype == g_float32) return kFloat32;
  if (dtype == g_float64) return kFloat64;
  bool has_bias = false;
  if (bias != nullptr) check(aoti_torch_is_defined(bias, &has_bias), "is_defined");
  return has_bias ? -1 : kNoBias;
}

bool runs_natively(int reason, bool native_available) {
  return reason >= 0 && native_available && g_native_reasons != nullptr && *g_report_each_call == 0;
}

void count_native(int64_t* counts, int op, int reason) {
  bump(&counts[1]);
  bump(&g_native_reasons[op * kNativeReasons + reason]);
}

// The Python road of the masked ops: routers_masked.py's router through the op's fallback op (the
// aten schema plus `str reason`, here empty: the router finds its own reason), which serves or falls
// back. Also where a native call PyTorch's kernel refused goes again (its checks run before any
// launch), so that its error reaches the caller as PyTorch raises it, warnings included.
constexpr std::array<int, 4> kFourTensors{0, 1, 2, 3};
constexpr const char* kEffFwdRoad = "flashsdpa::_scaled_dot_product_efficient_attention_fallback";
constexpr const char* kEffBwdRoad = "flashsdpa::_scaled_dot_product_efficient_attention_backward_fallback";

AtenTensorHandle tensor_at(const StableIValue* stack, int i) { return unboxed<AtenTensorHandle>(stack[i]); }

// aten::_scaled_dot_product_efficient_attention(query, key, value, attn_bias?, compute_log_sumexp,
// dropout_p, is_causal, *, scale) -> (output, log_sumexp, philox_seed, philox_offset).
void eff_forward(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
  AtenTensorHandle bias = peek_optional_tensor(stack[3]);
  const int reason = native_reason(bias, tensor_at(stack, 0));
  std::array<AtenTensorHandle, 4> ret{};
  std::optional<double> scale = peek_optional_double(stack[7]);
  if (!runs_natively(reason, g_eff_fwd_native != nullptr) ||
      g_eff_fwd_native(tensor_at(stack, 0), tensor_at(stack, 1), tensor_at(stack, 2), bias == nullptr ? nullptr : &bias,
                       unboxed<bool>(stack[4]), unboxed<double>(stack[5]), unboxed<bool>(stack[6]),
                       scale.has_value() ? &*scale : nullptr, &ret[0], &ret[1], &ret[2],
                       &ret[3]) != AOTI_TORCH_SUCCESS) {
    fall_back(kEffFwdRoad, stack, num_args, num_outputs, "", kFourTensors, kFourTensors);
    return;
  }
  for (int i : {0, 1, 2}) aoti_torch_delete_tensor_object(tensor_at(stack, i));
  consume_optional_tensor(stack[3]);
  consume_optional_double(stack[7]);
  for (int i = 0; i < 4; ++i) stack[i] = boxed(ret[i]);
  bump(g_routed);
  count_native(g_eff_fwd_counts, 0, reason);
}

// aten::_scaled_dot_product_efficient_attention_backward(grad_out_, query, key, value, attn_bias,
// out, logsumexp, philox_seed, philox_offset, dropout_p, grad_input_mask, is_causal, *, scale)
// -> (grad_query, grad_key, grad_value, grad_attn_bias). attn_bias is undefined without a mask.
void eff_backward(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
  const int reason = native_reason(tensor_at(stack, 4), tensor_at(stack, 1));
  // grad_input_mask: bool[4], boxed as a list (read in place: the Python road would take it whole).
  const auto mask_list = unboxed<StableListHandle>(stack[10]);
  std::array<int32_t, 4> mask{};
  size_t mask_len = 0;
  check(torch_list_size(mask_list, &mask_len), "list_size");
  if (mask_len != mask.size()) throw std::runtime_error("flashsdpa: grad_input_mask is not bool[4]");
  for (size_t i = 0; i < mask_len; ++i) {
    StableIValue item = 0;
    check(torch_list_get_item(mask_list, i, &item), "list_get_item");
    mask[i] = unboxed<bool>(item) ? 1 : 0;
  }
  std::array<AtenTensorHandle, 4> ret{};
  std::optional<double> scale = peek_optional_double(stack[12]);
  if (!runs_natively(reason, g_eff_bwd_native != nullptr) ||
      g_eff_bwd_native(tensor_at(stack, 0), tensor_at(stack, 1), tensor_at(stack, 2), tensor_at(stack, 3),
                       tensor_at(stack, 4), tensor_at(stack, 5), tensor_at(stack, 6), tensor_at(stack, 7),
                       tensor_at(stack, 8), unboxed<double>(stack[9]), mask.data(), 4, unboxed<bool>(stack[11]),
                       scale.has_value() ? &*scale : nullptr, &ret[0], &ret[1], &ret[2],
                       &ret[3]) != AOTI_TORCH_SUCCESS) {
    fall_back(kEffBwdRoad, stack, num_args, num_outputs, "", kFourTensors, kFourTensors);
    return;
  }
  for (int i : {0, 1, 2, 3, 4, 5, 6, 7, 8}) aoti_torch_delete_tensor_object(tensor_at(stack, i));
  check(torch_delete_list(mask_list), "delete_list");
  consume_optional_double(stack[12]);
  for (int i = 0; i < 4; ++i) stack[i] = boxed(ret[i]);
  count_native(g_eff_bwd_counts, 1, reason);
}

// Messages of the C entry points below: static, valid until the next call.
const char* refuse(const std::string& why) {
  static std::string message;
  message = why;
  return message.c_str();
}

void* loaded_symbol(const char* library, const char* name) {
  void* handle = dlopen(library, RTLD_NOLOAD | RTLD_LAZY);
  return handle == nullptr ? nullptr : dlsym(handle, name);
}

}  // namespace

// ---- the C entry points (python/flashsdpa/cxx_routers.py calls them through ctypes) -----------------

extern "C" {

// The RouterTable version this library was built against (_C.ROUTER_TABLE_VERSION must match).
uint32_t flashsdpa_routers_table_version() { return flashsdpa::kRouterTableVersion; }

// Check _C's table and resolve what the routers need; nullptr when they can serve, else why not.
// routed: routers.ROUTED's int64; fwd_counts / bwd_counts: the [served, fallback] int64 pairs of the
// two ops (reporting.counter).
const char* flashsdpa_routers_init(uintptr_t table, int64_t* routed, int64_t* fwd_counts, int64_t* bwd_counts) {
  const auto* t = reinterpret_cast<const RouterTable*>(table);
  if (t == nullptr) return refuse("no RouterTable given");
  if (t->version != flashsdpa::kRouterTableVersion || t->size != sizeof(RouterTable))
    return refuse("flashsdpa._C's RouterTable is version " + std::to_string(t->version) + " (" +
                  std::to_string(t->size) + " bytes); this library needs version " +
                  std::to_string(flashsdpa::kRouterTableVersion) + " (" + std::to_string(sizeof(RouterTable)) +
                  " bytes): rebuild both together");
  g_global_context = reinterpret_cast<GlobalContextFn>(loaded_symbol("libtorch_cpu.so", "_ZN2at13globalContextEv"));
  g_deterministic =
      reinterpret_cast<DeterministicFn>(loaded_symbol("libtorch_cpu.so", "_ZNK2at7Context23deterministicAlgorithmsEv"));
  if (g_global_context == nullptr || g_deterministic == nullptr)
    return refuse("this torch's libtorch_cpu exports no at::Context::deterministicAlgorithms()");
  g_current_stream =
      reinterpret_cast<CurrentStreamFn>(loaded_symbol("libtorch_cuda.so", "aoti_torch_get_current_cuda_stream"));
  g_eff_fwd_native = reinterpret_cast<EffFwdFn>(
      loaded_symbol("libtorch_cuda.so", "aoti_torch_cuda__scaled_dot_product_efficient_attention"));
  g_eff_bwd_native = reinterpret_cast<EffBwdFn>(
      loaded_symbol("libtorch_cuda.so", "aoti_torch_cuda__scaled_dot_product_efficient_attention_backward"));
  g_float16 = aoti_torch_dtype_float16(), g_bfloat16 = aoti_torch_dtype_bfloat16();
  g_float32 = aoti_torch_dtype_float32(), g_float64 = aoti_torch_dtype_float64();
  g_uint8 = aoti_torch_dtype_uint8(), g_uint64 = aoti_torch_dtype_uint64();
  g_cuda = aoti_torch_device_type_cuda();
  g_table = t, g_routed = routed, g_fwd_counts = fwd_counts, g_bwd_counts = bwd_counts;
  return nullptr;
}

// The masked ops' state (eff_forward / eff_backward): their [served, fallback] counts, the
// [op][reason] counts of the calls run natively (reporting.native_reason_cells), and the flag that
// sends every call down the Python road while set. nullptr when the routers can take these ops, else
// why not (this torch's libtorch_cuda lacks AOTInductor's shims of their CUDA kernels).
const char* flashsdpa_routers_init_masked(int64_t* eff_fwd_counts, int64_t* eff_bwd_counts, int64_t* native_reasons,
                                          const int64_t* report_each_call) {
  if (g_table == nullptr) return refuse("flashsdpa_routers_init has not succeeded");
  if (g_eff_fwd_native == nullptr || g_eff_bwd_native == nullptr)
    return refuse("this torch's libtorch_cuda has no aoti_torch_cuda__scaled_dot_product_efficient_attention shims");
  g_eff_fwd_counts = eff_fwd_counts, g_eff_bwd_counts = eff_bwd_counts;
  g_native_reasons = native_reasons, g_report_each_call = report_each_call;
  return nullptr;
}

// The number of native reasons per op (routers_masked.NATIVE_REASONS must have as many).
int flashsdpa_routers_native_reasons() { return kNativeReasons; }

// Whether this torch can launch (it has libtorch_cuda's current-stream shim): without it the routers
// register (tests do, on a CPU-only torch) but no CUDA kernel of aten ever runs to reach them.
int flashsdpa_routers_has_cuda() { return g_current_stream != nullptr ? 1 : 0; }

// Register the routers at `dispatch_key` ("CUDA"; the CPU tests take "CPU" to drive the fallback
// path with CPU tensors) of the ops in `ops` (bit 0: the flash forward, bit 1: its backward, bits 2
// and 3: the efficient-attention forward and backward; Python has checked each op's live schema).
// nullptr on success, else why not (nothing registered).
const char* flashsdpa_routers_register(int ops, const char* dispatch_key) {
  if (g_table == nullptr) return refuse("flashsdpa_routers_init has not succeeded");
  if (g_library != nullptr) return refuse("already registered");
  TorchLibraryHandle library = nullptr;
  if (aoti_torch_library_init_impl("aten", dispatch_key, __FILE__, __LINE__, &library) != AOTI_TORCH_SUCCESS)
    return refuse(std::string("torch::Library(aten, IMPL, ") + dispatch_key + ") failed");
  const std::array<std::pair<const char*, void (*)(StableIValue*, uint64_t, uint64_t)>, 4> routes{
      {{"_scaled_dot_product_flash_attention", &sdpa_flash_forward},
       {"_scaled_dot_product_flash_attention_backward", &sdpa_flash_backward},
       {"_scaled_dot_product_efficient_attention", &eff_forward},
       {"_scaled_dot_product_efficient_attention_backward", &eff_backward}}};
  if ((ops & 12) && g_native_reasons == nullptr) return refuse("flashsdpa_routers_init_masked has not succeeded");
  for (size_t i = 0; i < routes.size(); ++i) {
    if (!(ops >> i & 1)) continue;
    if (torch_library_impl(library, routes[i].first, routes[i].second, TORCH_ABI_VERSION) != AOTI_TORCH_SUCCESS) {
      aoti_torch_delete_library_object(library);
      return refuse(std::string("registering aten::") + routes[i].first + " failed");
    }
  }
  g_library = library;
  return nullptr;
}

// Deregister: PyTorch's kernels are back at once (torch::Library's destructor).
void flashsdpa_routers_unregister() {
  if (g_library != nullptr) aoti_torch_delete_library_object(g_library);
  g_library = nullptr;
}

// Called by the Python fallback op when PyTorch's kernel raised: the router raises this message.
void flashsdpa_routers_fail(const char* message) {
  t_fallback_error = message;
  t_fallback_failed = true;
}

}  // extern "C"
