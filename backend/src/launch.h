// launch.h: device handling around a launch. Caches per-device properties, picks the kernel
// family per (device, problem) from the capability table (so one GPU can run two families), and
// launches with the tensors' device current.
#pragma once

#include <string>

#include "capabilities.h"
#include "flashsdpa/params.h"

namespace flashsdpa {

struct DeviceInfo {
  std::string name;
  int major = 0, minor = 0, sms = 0;
  int64_t smem_optin_bytes = 0;
  std::string family;  // the first family that runs on this device at all, empty if none
};

DeviceInfo device_info(int device);  // throws std::runtime_error without CUDA or on a bad index

// The table's verdict for a problem on `device`: the serving family (nullptr: none) and, from it,
// the head-dim bucket and the tile of the direction. `reasons` says why not, per family.
struct Selection {
  const FamilyCaps* family = nullptr;
  int bucket = 0;
  TilePlan tile{-1, 0};
  std::string reasons;
};
// deterministic: a backward under torch.use_deterministic_algorithms(True) (families whose
// backward is not bitwise reproducible refuse it).
Selection select(int device, DType dtype, int head_dim_qk, int head_dim_v, MaskKind mask, Layout layout,
                 Direction direction, bool deterministic = false, unsigned features = 0);

// Pick the family and fill the params' device facts, head_dim_bucket (and for a backward bwd_tile
// and the dq_accum strides, from delta's: set those and every field the families' per-call hooks
// read first); throws std::invalid_argument naming each family's reason when none serves the call.
// yielded (forward): set to the speed rule's reason when a family that takes the call hands it on
// (capabilities.h's fwd_yields), untouched otherwise.
const FamilyCaps& plan_fwd(AttnFwdParams& params, int device, std::string* yielded = nullptr);
const FamilyCaps& plan_bwd(AttnBwdParams& params, int device);
void launch_fwd(const FamilyCaps& family, const AttnFwdParams& params, int device, void* stream);
void launch_bwd(const FamilyCaps& family, const AttnBwdParams& params, int device, void* stream);
// The bias summary (kernels.h's run_bias_cells), with `device` current; any CUDA build has it.
void launch_bias_cells(const BiasCellsParams& params, int device, void* stream);

}  // namespace flashsdpa
