// module.cpp: the pybind11 module flashsdpa._C. Converts Python ints/tuples into the plain
// arguments of api.h and nothing else: no torch types cross this boundary, so one build of _C
// works with any torch. Kept flat (positional ints) because it sits on the per-call hot path.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "api.h"
#include "build_config.h"
#include "flashsdpa/kernels.h"
#include "launch.h"

namespace py = pybind11;
using namespace flashsdpa;

namespace {

py::dict build_info() {
  const BuildConfig& c = build_config();
  py::dict d;
  d["version"] = c.version;
  d["with_cuda"] = c.with_cuda;
  d["cuda_version"] = c.with_cuda ? py::object(py::str(c.cuda_version)) : py::object(py::none());
  d["archs"] = c.archs;
  d["dtypes"] = c.dtypes;
  d["head_dims"] = c.head_dims;
  d["kernel_families"] = c.kernel_families;
  d["max_head_dim"] = 256;
  return d;
}

py::dict device_info_dict(int device) {
  const DeviceInfo info = device_info(device);
  py::dict d;
  d["name"] = info.name;
  d["major"] = info.major;
  d["minor"] = info.minor;
  d["sms"] = info.sms;
  d["smem_optin_bytes"] = info.smem_optin_bytes;
  d["family"] = info.family.empty() ? py::object(py::none()) : py::object(py::str(info.family));
  return d;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "flashsdpa kernels: raw pointers, strides and sizes in; no torch dependency";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const std::invalid_argument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  m.def("build_info", &build_info, "What this build contains: version, CUDA, archs, dtypes, head-dim buckets.");
  m.def("device_info", &device_info_dict, py::arg("device_index"), "Name, capability, SMs, kernel family.");
  m.def("head_dim_bucket", &head_dim_bucket, py::arg("head_dim_qk"), py::arg("head_dim_v"),
        "Compiled head-dim bucket serving max(head_dim_qk, head_dim_v); 0 if none.");

  m.def(
      "fwd",
      [](uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o, uintptr_t lse, const Strides& qs, const Strides& ks,
         const Strides& vs, const Strides& os, const Strides& ls, int32_t batch, int32_t heads_q, int32_t heads_kv,
         int32_t seqlen_q, int32_t seqlen_k, int32_t head_dim_qk, int32_t head_dim_v, uintptr_t cu_q, uintptr_t cu_k,
         uintptr_t used_k, float scale, int causal, int dtype, int device, uintptr_t stream) {
        fwd(q, k, v, o, lse, qs, ks, vs, os, ls,
            ProblemShape{batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim_qk, head_dim_v},
            VarlenArgs{cu_q, cu_k, used_k}, scale, causal, dtype, device, stream);
      },
      "Forward attention: writes out and lse. Strides are (batch, head, row) in elements.");

  m.def("bwd_workspace_bytes", &bwd_workspace_bytes, py::arg("batch"), py::arg("heads_q"), py::arg("seqlen_q"),
        py::arg("head_dim_qk"), py::arg("head_dim_v"), py::arg("total_q"),
        "Workspace bytes bwd() needs (total_q = -1 for dense inputs).");

  m.def(
      "bwd",
      [](uintptr_t dout, uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o, uintptr_t lse, uintptr_t dq, uintptr_t dk,
         uintptr_t dv, const Strides& dos, const Strides& qs, const Strides& ks, const Strides& vs, const Strides& os,
         const Strides& ls, const Strides& dqs, const Strides& dks, const Strides& dvs, int32_t batch, int32_t heads_q,
         int32_t heads_kv, int32_t seqlen_q, int32_t seqlen_k, int32_t head_dim_qk, int32_t head_dim_v,
         uintptr_t cu_q, uintptr_t cu_k, uintptr_t used_k, float scale, int causal, int dtype, uintptr_t workspace,
         int64_t workspace_bytes, int64_t total_q, int device, uintptr_t stream) {
        bwd(dout, q, k, v, o, lse, dq, dk, dv, dos, qs, ks, vs, os, ls, dqs, dks, dvs,
            ProblemShape{batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim_qk, head_dim_v},
            VarlenArgs{cu_q, cu_k, used_k}, scale, causal, dtype, workspace, workspace_bytes, total_q, device,
            stream);
      },
      "Backward attention: writes dq, dk, dv using a caller-allocated workspace.");
}
