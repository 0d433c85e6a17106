// build_config.h: what this build of _C contains. The lists arrive from CMake as compile
// definitions (FLASHSDPA_HEAD_DIMS_LIST=64,128,256 ...), so _C reports exactly what was compiled
// and the Python selection never offers a call to a kernel that is not there. Which kernel
// families were compiled, and what each serves, is capabilities.h's table.
#pragma once

#include <string>
#include <vector>

namespace flashsdpa {

struct BuildConfig {
  std::string version;
  bool with_cuda;
  std::string cuda_version;          // "13.0", empty without CUDA
  std::vector<int> archs;            // FLASHSDPA_ARCHS: SASS targets of the portable family, e.g. {80, 90}
  std::vector<std::string> dtypes;   // "float16", "bfloat16"
  std::vector<int> head_dims;        // compiled head-dim buckets, ascending
};

const BuildConfig& build_config();

}  // namespace flashsdpa
