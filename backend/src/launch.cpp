// launch.cpp: see launch.h.
#include "launch.h"

#include <array>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include "build_config.h"
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

std::string family_for(int major, int minor) {
  // The portable family runs where the build has SASS of the same major at or below the device's
  // minor (sm_80 SASS on 8.6 and 8.9), or, through the driver's JIT of the embedded PTX
  // (CMake embeds compute_XX for every arch), on any device newer than a compiled arch: an
  // sm_80-only build runs on an H100, its first launches slower while the driver compiles.
  const int capability = major * 10 + minor;
  for (int arch : build_config().archs) {
    if (arch <= capability) return "sm80";
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

const DeviceInfo& serving_device(int device) {
  const DeviceInfo& info = cached_device_info(device);
  if (info.family.empty())
    throw std::invalid_argument("device " + std::to_string(device) + " (" + info.name + ", compute capability " +
                                std::to_string(info.major) + "." + std::to_string(info.minor) +
                                "): this build has no kernels for it (compiled archs: FLASHSDPA_ARCHS)");
  return info;
}

void set_device_facts(AttnFwdParams& params, const DeviceInfo& info) {
  params.num_sms = info.sms;
  params.cc_major = info.major;
  params.smem_optin_bytes = static_cast<int32_t>(info.smem_optin_bytes);
}

}  // namespace

DeviceInfo device_info(int device) { return cached_device_info(device); }

int bwd_smem_bytes(int head_dim_qk, int head_dim_v, int device) {
  const DeviceInfo& info = serving_device(device);
  return bwd_smem_bytes_sm80(head_dim_qk, head_dim_v, info.major, static_cast<int>(info.smem_optin_bytes));
}

// FLASHSDPA_FAMILY=sm80 forces the portable family (tests run every shape against both);
// =sm90 makes a problem the Hopper family cannot take an error instead of a quiet fallback.
// Read once: the choice is per process.
const char* forced_family() {
  static const char* family = std::getenv("FLASHSDPA_FAMILY");
  return family;
}

void launch_fwd(AttnFwdParams& params, int device, void* stream) {
  const DeviceInfo& info = serving_device(device);
  set_device_facts(params, info);
  DeviceGuard guard(device);
#ifdef FLASHSDPA_WITH_SM90
  const char* forced = forced_family();
  const bool want_sm90 = forced == nullptr || std::string(forced) != "sm80";
  if (want_sm90 && info.major == 9 && info.minor == 0) {
    const char* reason = fwd_sm90_unsupported(params);
    if (reason == nullptr) {
      const auto err = static_cast<cudaError_t>(run_fwd_sm90(params, stream));
      // cudaErrorNotSupported: the driver refused a TMA descriptor before anything was launched.
      if (err != cudaErrorNotSupported) {
        throw_on_error(err, "forward launch (sm90)");
        return;
      }
      reason = "the driver refused a TMA descriptor";
    }
    if (forced != nullptr && std::string(forced) == "sm90")
      throw std::invalid_argument(std::string("FLASHSDPA_FAMILY=sm90: ") + reason);
  }
#endif
  throw_on_error(static_cast<cudaError_t>(run_fwd_sm80(params, stream)), "forward launch");
}

void launch_bwd(AttnBwdParams& params, int device, void* stream) {
  set_device_facts(params, serving_device(device));
  DeviceGuard guard(device);
  throw_on_error(static_cast<cudaError_t>(run_bwd_sm80(params, stream)), "backward launch");
}

#else  // CPU-only build: the package imports and always falls back.

namespace {
[[noreturn]] void no_cuda() {
  throw std::runtime_error("flashsdpa._C was built without CUDA (no nvcc at build time)");
}
}  // namespace

DeviceInfo device_info(int) { no_cuda(); }
int bwd_smem_bytes(int, int, int) { no_cuda(); }
void launch_fwd(AttnFwdParams&, int, void*) { no_cuda(); }
void launch_bwd(AttnBwdParams&, int, void*) { no_cuda(); }

#endif

}  // namespace flashsdpa
