// module.cpp: the pybind11 module flashsdpa._C. Converts Python ints/tuples into the plain
// arguments of api.h and nothing else: no torch types cross this boundary, so one build of _C
// works with any torch. Kept flat (positional ints) because it sits on the per-call hot path.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>

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

// A stride argument: the first three items of a tuple of ints, (batch, head, row) in elements.
// Callers pass Tensor.stride() whole (four items for a (B, H, S, D) view): no slice in Python, and
// reading the tuple in place skips pybind11's generic sequence-to-std::array conversion.
Strides strides_arg(py::handle obj, const char* name) {
  PyObject* tuple = obj.ptr();
  const auto bad = [&]() {
    return std::invalid_argument(std::string(name) + "=" + std::string(py::repr(obj)) +
                                 ": needs a tuple of at least 3 ints (batch, head, row strides in elements)");
  };
  if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) < 3) throw bad();
  Strides s{};
  for (int i = 0; i < 3; ++i) {
    const long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));  // ints, or objects with __index__
    if (v == -1 && PyErr_Occurred()) {
      PyErr_Clear();  // not an int, or out of int64 range: reported as this argument's ValueError
      throw bad();
    }
    s[i] = v;
  }
  return s;
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
      [](uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o, uintptr_t lse, py::handle qs, py::handle ks,
         py::handle vs, py::handle os, py::handle ls, int32_t batch, int32_t heads_q, int32_t heads_kv,
         int32_t seqlen_q, int32_t seqlen_k, int32_t head_dim_qk, int32_t head_dim_v, uintptr_t cu_q, uintptr_t cu_k,
         uintptr_t used_k, float scale, int causal, int dtype, int device, uintptr_t stream) {
        // Converted in argument order (a call's argument evaluation order is unspecified), so that
        // the first bad argument is the one reported.
        const Strides q_strides = strides_arg(qs, "q_strides"), k_strides = strides_arg(ks, "k_strides"),
                      v_strides = strides_arg(vs, "v_strides"), o_strides = strides_arg(os, "out_strides"),
                      lse_strides = strides_arg(ls, "lse_strides");
        fwd(q, k, v, o, lse, q_strides, k_strides, v_strides, o_strides, lse_strides,
            ProblemShape{batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim_qk, head_dim_v},
            VarlenArgs{cu_q, cu_k, used_k}, scale, causal, dtype, device, stream);
      },
      "Forward attention: writes out and lse. Strides are tuples whose first three items are the\n"
      "(batch, head, row) strides in elements (Tensor.stride() may be passed whole).");

  m.def("bwd_smem_bytes", &bwd_smem_bytes, py::arg("head_dim_qk"), py::arg("head_dim_v"), py::arg("device_index"),
        "Shared memory per block the backward takes there (its tile follows the device's limit); 0: none fits.");
  m.def("bwd_workspace_bytes", &bwd_workspace_bytes, py::arg("batch"), py::arg("heads_q"), py::arg("seqlen_q"),
        py::arg("head_dim_qk"), py::arg("head_dim_v"), py::arg("total_q"),
        "(dq_accum, delta) bytes: the two workspace buffers bwd() needs (total_q = -1 for dense inputs).");

  m.def(
      "bwd",
      [](uintptr_t dout, uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o, uintptr_t lse, uintptr_t dq, uintptr_t dk,
         uintptr_t dv, py::handle dos, py::handle qs, py::handle ks, py::handle vs, py::handle os, py::handle ls,
         py::handle dqs, py::handle dks, py::handle dvs, int32_t batch, int32_t heads_q, int32_t heads_kv,
         int32_t seqlen_q, int32_t seqlen_k, int32_t head_dim_qk, int32_t head_dim_v, uintptr_t cu_q, uintptr_t cu_k,
         uintptr_t used_k, float scale, int causal, int dtype, uintptr_t dq_accum, int64_t dq_accum_bytes,
         uintptr_t delta, int64_t delta_bytes, int64_t total_q, int device, uintptr_t stream) {
        const Strides dout_strides = strides_arg(dos, "dout_strides"), q_strides = strides_arg(qs, "q_strides"),
                      k_strides = strides_arg(ks, "k_strides"), v_strides = strides_arg(vs, "v_strides"),
                      o_strides = strides_arg(os, "out_strides"), lse_strides = strides_arg(ls, "lse_strides"),
                      dq_strides = strides_arg(dqs, "dq_strides"), dk_strides = strides_arg(dks, "dk_strides"),
                      dv_strides = strides_arg(dvs, "dv_strides");
        bwd(dout, q, k, v, o, lse, dq, dk, dv, dout_strides, q_strides, k_strides, v_strides, o_strides, lse_strides,
            dq_strides, dk_strides, dv_strides,
            ProblemShape{batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim_qk, head_dim_v},
            VarlenArgs{cu_q, cu_k, used_k}, scale, causal, dtype, Workspace{dq_accum, dq_accum_bytes, delta, delta_bytes},
            total_q, device, stream);
      },
      "Backward attention: writes dq, dk, dv using caller-allocated dq_accum and delta buffers. Strides as in fwd.");
}
