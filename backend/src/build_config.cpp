// build_config.cpp: see build_config.h.
#include "build_config.h"

#include <algorithm>
#include <sstream>


#ifndef FLASHSDPA_VERSION
#define FLASHSDPA_VERSION "0.0.0"
#endif
#ifndef FLASHSDPA_HEAD_DIMS_LIST
#define FLASHSDPA_HEAD_DIMS_LIST ""
#endif
#ifndef FLASHSDPA_ARCHS_LIST
#define FLASHSDPA_ARCHS_LIST ""
#endif
#ifndef FLASHSDPA_DTYPES_LIST
#define FLASHSDPA_DTYPES_LIST ""
#endif
#ifndef FLASHSDPA_CUDA_VERSION
#define FLASHSDPA_CUDA_VERSION ""
#endif

namespace flashsdpa {
namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<int> split_ints(const std::string& s) {
  std::vector<int> out;
  for (const auto& item : split(s)) out.push_back(std::stoi(item));
  std::sort(out.begin(), out.end());
  return out;
}

BuildConfig make_config() {
  BuildConfig c;
  c.version = FLASHSDPA_VERSION;
#ifdef FLASHSDPA_WITH_CUDA
  c.with_cuda = true;
  c.cuda_version = FLASHSDPA_CUDA_VERSION;
  c.archs = split_ints(FLASHSDPA_ARCHS_LIST);
  c.head_dims = split_ints(FLASHSDPA_HEAD_DIMS_LIST);
  for (const auto& d : split(FLASHSDPA_DTYPES_LIST)) c.dtypes.push_back(d == "fp16" ? "float16" : "bfloat16");
#else
  c.with_cuda = false;
#endif
  return c;
}

}  // namespace

const BuildConfig& build_config() {
  static const BuildConfig config = make_config();
  return config;
}

}  // namespace flashsdpa
