// launch.h: device handling around a launch. Makes the tensors' device current for the duration of
// one launch, caches per-device properties, and picks the kernel family for the device (today the
// portable sm80 family everywhere it runs; a Hopper family slots in here).
#pragma once

#include <string>

#include "flashsdpa/params.h"

namespace flashsdpa {

struct DeviceInfo {
  std::string name;
  int major = 0, minor = 0, sms = 0;
  int64_t smem_optin_bytes = 0;
  std::string family;  // kernel family that serves this device, empty if none
};

DeviceInfo device_info(int device);  // throws std::runtime_error without CUDA or on a bad index
// Shared memory per block the backward takes for this head-dim pair on `device` (its tile choice
// follows the device's opt-in limit), 0 when no backward tile fits there: callers fall back.
int bwd_smem_bytes(int head_dim_qk, int head_dim_v, int device);
void launch_fwd(AttnFwdParams& params, int device, void* stream);
void launch_bwd(AttnBwdParams& params, int device, void* stream);

}  // namespace flashsdpa
