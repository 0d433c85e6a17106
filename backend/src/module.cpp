// module.cpp: the pybind11 module flashsdpa._C. Converts Python ints and tuples into the spec
// structs of api.h and nothing else: no torch types cross this boundary, so one build of _C works
// with any torch. The per-call entries (fwd, bwd) take their spec as nested tuples read with the
// CPython API in place (one argument instead of 25 / 36 pybind11-converted ones); the layout is
// written once, in spec_* below, and mirrored by python/flashsdpa/_backend.py's launch().
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <climits>
#include <stdexcept>
#include <string>

#include "api.h"
#include "build_config.h"
#include "capabilities.h"
#include "decode.h"
#include "flashsdpa/router_table.h"
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
  py::list names;
  for (const FamilyCaps& f : families()) names.append(f.name);
  d["kernel_families"] = names;
  d["max_head_dim"] = kMaxHeadDim;
  return d;
}

[[noreturn]] void bad_spec(const char* name, py::handle obj, const char* need) {
  throw std::invalid_argument(std::string(name) + "=" + std::string(py::repr(obj)) + ": needs " + need);
}

// A tuple of at least n items (the spec's groups).
PyObject* tuple_arg(py::handle obj, Py_ssize_t n, const char* name) {
  if (!PyTuple_Check(obj.ptr()) || PyTuple_GET_SIZE(obj.ptr()) < n) bad_spec(name, obj, "a tuple (see module.cpp)");
  return obj.ptr();
}

int64_t int_item(PyObject* tuple, Py_ssize_t i, const char* name) {
  const long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));  // ints, or objects with __index__
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();  // not an int, or out of int64 range: reported as this argument's ValueError
    bad_spec(name, PyTuple_GET_ITEM(tuple, i), "an int");
  }
  return v;
}

int32_t int32_item(PyObject* tuple, Py_ssize_t i, const char* name) {
  const int64_t v = int_item(tuple, i, name);
  if (v < INT32_MIN || v > INT32_MAX) bad_spec(name, PyTuple_GET_ITEM(tuple, i), "an int32");
  return static_cast<int32_t>(v);
}

// A stride argument: the first three items of a tuple of ints, (batch, head, row) in elements.
// Callers pass Tensor.stride() whole (four items for a (B, H, S, D) view): no slice in Python.
Strides strides_item(PyObject* tuple, Py_ssize_t i, const char* name) {
  PyObject* t = tuple_arg(PyTuple_GET_ITEM(tuple, i), 3, name);
  return Strides{int_item(t, 0, name), int_item(t, 1, name), int_item(t, 2, name)};
}

// fwd spec = (pointers, strides, sizes, mask, scale, dtype, device, stream[, mods]):
//   pointers = (q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k[, workspace, workspace_bytes])
//              ints, 0 = none; workspace: the forward's (fwd_workspace_bytes reports its size)
//   strides  = (q, k, v, out, lse)                                          stride tuples
//   sizes    = (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim_qk, head_dim_v, total_q, total_k)
//              total_q / total_k: the packed rows of q and k (varlen), -1 when dense
//   mask     = (window_left, window_right, align)                          -1 = unbounded; align 0 / 1
// and optionally, in this order (a later one needs the earlier ones; None = absent):
//   decode   = (num_splits, o_accum, lse_accum, o_accum_bytes, lse_accum_bytes, block_table,
//               block_table_batch_stride, page_size, num_pages, seqused_k_add)   the decode path's
//               arguments (decode_plan reports num_splits and the workspace bytes; pointers 0 =
//               none; seqused_k_add: the rows a KV-cache call appends, added to seqused_k[b])
//   mods     = (softcap, alibi_slopes, alibi_batch_stride, sinks[, bias, bias_batch_stride,
//               bias_head_stride, bias_row_stride[, bias_cells, cells_batch_stride,
//               cells_head_stride, cells_row_stride]])   issue 14's score modifiers
//              (float32 device pointers, 0 = none): absent on the plain path, which builds no
//              tuple for them
//   dropout  = (p, seed, offset, seed_ptr, offset_ptr, rng_state)   p in (0, 1); seed / offset uint64
//              values, the pointers device uint64 addresses (0 = none; params.h's DropoutSpec)
// Items are converted in this order, so the first bad one is the one reported.
FwdSpec fwd_spec(py::handle obj) {
  PyObject* spec = tuple_arg(obj, 8, "spec");
  PyObject* ptrs = tuple_arg(PyTuple_GET_ITEM(spec, 0), 8, "spec.pointers");
  PyObject* strides = tuple_arg(PyTuple_GET_ITEM(spec, 1), 5, "spec.strides");
  PyObject* sizes = tuple_arg(PyTuple_GET_ITEM(spec, 2), 9, "spec.sizes");
  PyObject* mask = tuple_arg(PyTuple_GET_ITEM(spec, 3), 3, "spec.mask");
  FwdSpec s{};
  TensorArg* tensors[] = {&s.q, &s.k, &s.v, &s.out, &s.lse};
  const char* names[] = {"q_strides", "k_strides", "v_strides", "out_strides", "lse_strides"};
  for (int i = 0; i < 5; ++i) {
    tensors[i]->ptr = static_cast<uintptr_t>(int_item(ptrs, i, "spec.pointers"));
    tensors[i]->strides = strides_item(strides, i, names[i]);
  }
  s.varlen.cu_seqlens_q = static_cast<uintptr_t>(int_item(ptrs, 5, "cu_seqlens_q"));
  s.varlen.cu_seqlens_k = static_cast<uintptr_t>(int_item(ptrs, 6, "cu_seqlens_k"));
  s.varlen.seqused_k = static_cast<uintptr_t>(int_item(ptrs, 7, "seqused_k"));
  // Optional 9th and 10th: the forward's workspace (params.h) and its bytes.
  if (PyTuple_GET_SIZE(ptrs) > 8) {
    tuple_arg(ptrs, 10, "spec.pointers");
    s.workspace = static_cast<uintptr_t>(int_item(ptrs, 8, "workspace"));
    s.workspace_bytes = int_item(ptrs, 9, "workspace_bytes");
  }
  s.shape = ProblemShape{int32_item(sizes, 0, "batch"),       int32_item(sizes, 1, "heads_q"),
                         int32_item(sizes, 2, "heads_kv"),    int32_item(sizes, 3, "seqlen_q"),
                         int32_item(sizes, 4, "seqlen_k"),    int32_item(sizes, 5, "head_dim_qk"),
                         int32_item(sizes, 6, "head_dim_v")};
  s.varlen.total_q = int_item(sizes, 7, "total_q");
  s.varlen.total_k = int_item(sizes, 8, "total_k");
  s.mask = MaskSpec{int32_item(mask, 0, "window_left"), int32_item(mask, 1, "window_right"),
                    static_cast<MaskAlign>(int32_item(mask, 2, "mask align"))};
  const double scale = PyFloat_AsDouble(PyTuple_GET_ITEM(spec, 4));
  if (scale == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    bad_spec("scale", PyTuple_GET_ITEM(spec, 4), "a float");
  }
  s.scale = static_cast<float>(scale);
  s.dtype = int32_item(spec, 5, "dtype");
  s.device = int32_item(spec, 6, "device");
  s.stream = static_cast<uintptr_t>(int_item(spec, 7, "stream"));
  if (PyTuple_GET_SIZE(spec) > 8) {
    PyObject* item = PyTuple_GET_ITEM(spec, 8);
    if (item != Py_None) {
      PyObject* d = tuple_arg(item, 10, "spec.decode");
      s.decode = DecodeArgs{int32_item(d, 0, "num_splits"),
                            static_cast<uintptr_t>(int_item(d, 1, "o_accum")),
                            static_cast<uintptr_t>(int_item(d, 2, "lse_accum")),
                            int_item(d, 3, "o_accum_bytes"),
                            int_item(d, 4, "lse_accum_bytes"),
                            static_cast<uintptr_t>(int_item(d, 5, "block_table")),
                            int_item(d, 6, "block_table_batch_stride"),
                            int32_item(d, 7, "page_size"),
                            int32_item(d, 8, "num_pages"),
                            int32_item(d, 9, "seqused_k_add")};
    }
  }
  if (PyTuple_GET_SIZE(spec) > 9 && PyTuple_GET_ITEM(spec, 9) != Py_None) {
    PyObject* mods = tuple_arg(PyTuple_GET_ITEM(spec, 9), 4, "spec.mods");  // 8 with a bias, 12 with its cells
    const double softcap = PyFloat_AsDouble(PyTuple_GET_ITEM(mods, 0));
    if (softcap == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      bad_spec("softcap", PyTuple_GET_ITEM(mods, 0), "a float");
    }
    s.mods = ModsArg{static_cast<float>(softcap), static_cast<uintptr_t>(int_item(mods, 1, "alibi_slopes")),
                     int_item(mods, 2, "alibi_batch_stride"), static_cast<uintptr_t>(int_item(mods, 3, "sinks"))};
    if (PyTuple_GET_SIZE(mods) > 4) {
      tuple_arg(mods, 8, "spec.mods");
      s.mods.bias = static_cast<uintptr_t>(int_item(mods, 4, "bias"));
      s.mods.bias_batch_stride = int_item(mods, 5, "bias_batch_stride");
      s.mods.bias_head_stride = int_item(mods, 6, "bias_head_stride");
      s.mods.bias_row_stride = int_item(mods, 7, "bias_row_stride");
      if (PyTuple_GET_SIZE(mods) > 8) {
        tuple_arg(mods, 12, "spec.mods");
        s.mods.bias_cells = static_cast<uintptr_t>(int_item(mods, 8, "bias_cells"));
        s.mods.bias_cells_batch_stride = int_item(mods, 9, "bias_cells_batch_stride");
        s.mods.bias_cells_head_stride = int_item(mods, 10, "bias_cells_head_stride");
        s.mods.bias_cells_row_stride = int_item(mods, 11, "bias_cells_row_stride");
      }
    }
  }
  if (PyTuple_GET_SIZE(spec) > 10 && PyTuple_GET_ITEM(spec, 10) != Py_None) {
    PyObject* d = tuple_arg(PyTuple_GET_ITEM(spec, 10), 6, "spec.dropout");
    const double p = PyFloat_AsDouble(PyTuple_GET_ITEM(d, 0));
    if ((p == -1.0 && PyErr_Occurred()) || !(p >= 0.0 && p < 1.0)) {
      PyErr_Clear();
      bad_spec("dropout_p", PyTuple_GET_ITEM(d, 0), "a float in [0, 1)");
    }
    const char* names[] = {"dropout seed", "dropout offset"};
    uint64_t values[2];
    for (int i = 0; i < 2; ++i) {  // uint64: PyTorch's seeds use all 64 bits
      values[i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(d, 1 + i));
      if (values[i] == static_cast<uint64_t>(-1) && PyErr_Occurred()) {
        PyErr_Clear();
        bad_spec(names[i], PyTuple_GET_ITEM(d, 1 + i), "an int in [0, 2**64)");
      }
    }
    s.dropout = DropoutArg{static_cast<float>(p), values[0], values[1],
                           static_cast<uintptr_t>(int_item(d, 3, "dropout seed_ptr")),
                           static_cast<uintptr_t>(int_item(d, 4, "dropout offset_ptr")),
                           static_cast<uintptr_t>(int_item(d, 5, "rng_state"))};
  }
  return s;
}

// bwd grads = (pointers, strides, workspace_bytes, deterministic[, mod_grads]):
//   pointers = (dout, dq, dk, dv, dq_accum, delta); strides = (dout, dq, dk, dv);
//   workspace_bytes = (dq_accum, delta); deterministic: run the backward deterministically (Python
//   asks only where the capability table has a family that can); mod_grads = (d_alibi_slopes,
//   d_sinks[, d_bias]), 0 = not wanted
BwdSpec bwd_spec(py::handle fwd, py::handle grads) {
  BwdSpec s{};
  s.fwd = fwd_spec(fwd);
  PyObject* g = tuple_arg(grads, 4, "grads");
  PyObject* ptrs = tuple_arg(PyTuple_GET_ITEM(g, 0), 6, "grads.pointers");
  PyObject* strides = tuple_arg(PyTuple_GET_ITEM(g, 1), 4, "grads.strides");
  PyObject* bytes = tuple_arg(PyTuple_GET_ITEM(g, 2), 2, "grads.workspace_bytes");
  TensorArg* tensors[] = {&s.dout, &s.dq, &s.dk, &s.dv};
  const char* names[] = {"dout_strides", "dq_strides", "dk_strides", "dv_strides"};
  for (int i = 0; i < 4; ++i) {
    tensors[i]->ptr = static_cast<uintptr_t>(int_item(ptrs, i, "grads.pointers"));
    tensors[i]->strides = strides_item(strides, i, names[i]);
  }
  s.workspace = Workspace{static_cast<uintptr_t>(int_item(ptrs, 4, "dq_accum")), int_item(bytes, 0, "dq_accum_bytes"),
                          static_cast<uintptr_t>(int_item(ptrs, 5, "delta")), int_item(bytes, 1, "delta_bytes")};
  const int deterministic = PyObject_IsTrue(PyTuple_GET_ITEM(g, 3));
  if (deterministic < 0) {
    PyErr_Clear();
    bad_spec("deterministic", PyTuple_GET_ITEM(g, 3), "a bool");
  }
  s.deterministic = deterministic == 1;
  if (PyTuple_GET_SIZE(g) > 4) {
    PyObject* mod_grads = tuple_arg(PyTuple_GET_ITEM(g, 4), 2, "grads.mod_grads");
    s.d_alibi_slopes = static_cast<uintptr_t>(int_item(mod_grads, 0, "d_alibi_slopes"));
    s.d_sinks = static_cast<uintptr_t>(int_item(mod_grads, 1, "d_sinks"));
    if (PyTuple_GET_SIZE(mod_grads) > 2) s.d_bias = static_cast<uintptr_t>(int_item(mod_grads, 2, "d_bias"));
  }
  return s;
}

std::string direction_str(Direction d) { return d == Direction::kForward ? "forward" : "backward"; }

template <typename T, typename Name>
py::list names_of(const std::vector<T>& items, Name name) {
  py::list out;
  for (const T& item : items) out.append(name(item));
  return out;
}

// The table, one dict per compiled family (flashsdpa.capabilities()). Shared memory is listed per
// (direction, bucket, architecture major): every tile the family can pick there, largest first.
py::dict capabilities_dict() {
  py::list rows;
  for (const FamilyCaps& f : families()) {
    py::dict d;
    d["family"] = f.name;
    d["runs_on"] = f.runs_on;
    d["min_capability"] = py::make_tuple(f.min_capability / 10, f.min_capability % 10);
    d["max_capability"] = f.max_capability == 0 ? py::object(py::none())
                                                : py::object(py::make_tuple(f.max_capability / 10, f.max_capability % 10));
    d["archs"] = f.archs;
    d["dtypes"] = f.dtypes;
    d["head_dims"] = f.all_head_dims();
    py::dict per_direction;
    for (Direction dir : f.directions) per_direction[py::str(direction_str(dir))] = f.head_dims(dir);
    d["head_dims_by_direction"] = per_direction;
    d["head_dim_rule"] = "head_dim_qk and head_dim_v multiples of 8; max(head_dim_qk, head_dim_v) runs in the "
                         "family's smallest bucket >= it, where that direction has the bucket";
    d["masks"] = names_of(f.masks, [](MaskKind m) { return std::string(mask_kind_name(m)); });
    const auto layout_names = [](const std::vector<Layout>& v) {
      return names_of(v, [](Layout l) { return std::string(layout_name(l)); });
    };
    d["layouts"] = layout_names(f.layouts);  // the forward's (the backward's are a subset)
    py::dict layouts_by_direction;
    for (Direction dir : f.directions) layouts_by_direction[py::str(direction_str(dir))] = layout_names(f.layouts_of(dir));
    d["layouts_by_direction"] = layouts_by_direction;
    d["directions"] = names_of(f.directions, direction_str);
    // "features": what either direction serves; "features_by_direction": each direction's.
    const auto feature_names = [](const std::vector<Feature>& v) {
      return names_of(v, [](Feature x) { return std::string(feature_name(x)); });
    };
    std::vector<Feature> either = f.fwd_features;
    for (Feature x : f.bwd_features) {
      if (std::find(either.begin(), either.end(), x) == either.end()) either.push_back(x);
    }
    d["features"] = feature_names(either);
    py::dict features_by_direction;
    for (Direction dir : f.directions) features_by_direction[py::str(direction_str(dir))] = feature_names(f.features(dir));
    d["features_by_direction"] = features_by_direction;
    py::list smem;
    for (Direction dir : f.directions) {
      for (int bucket : f.head_dims(dir)) {
        for (int major : {8, 9}) {
          if (major * 10 + 9 < f.min_capability || (f.max_capability != 0 && major * 10 > f.max_capability)) continue;
          int limit = INT_MAX;
          for (TilePlan t = f.plan(dir, bucket, major, limit); t.tile >= 0; t = f.plan(dir, bucket, major, limit)) {
            py::dict row;
            row["direction"] = direction_str(dir);
            row["head_dim"] = bucket;
            row["cc_major"] = major;
            row["tile"] = t.tile;
            row["bytes"] = t.smem_bytes;
            smem.append(row);
            limit = t.smem_bytes - 1;
          }
        }
      }
    }
    d["smem_per_tile"] = smem;
    rows.append(d);
  }
  py::dict out;
  out["families"] = rows;
  const std::string reason = no_family_reason();
  out["reason"] = reason.empty() ? py::object(py::none()) : py::object(py::str(reason));
  return out;
}

// The table's verdict for one problem on one device: (family or None, bucket, tile, smem bytes,
// reasons). Python caches it per problem key; the launch makes the same choice in C++.
// layout: 0 dense, 1 varlen (a bool True reads as 1), 2 decode. backward: 0 forward, 1 backward
// (a bool reads as 0 / 1), 2 backward under torch.use_deterministic_algorithms(True). features:
// the score modifiers' bits (capabilities.h's Feature).
py::tuple select_tuple(int device, int dtype, int head_dim_qk, int head_dim_v, int mask, int layout, int backward,
                       int features) {
  if (dtype != 0 && dtype != 1) throw std::invalid_argument("dtype=" + std::to_string(dtype) + ": must be 0 or 1");
  if (mask < 0 || mask > 3) throw std::invalid_argument("mask=" + std::to_string(mask) + ": must be 0..3");
  if (layout < 0 || layout > 2) throw std::invalid_argument("layout=" + std::to_string(layout) + ": must be 0..2");
  if (features < 0 || features > kAllFeatureBits)
    throw std::invalid_argument("features=" + std::to_string(features) + ": must be a bit set of 0.." +
                                std::to_string(kAllFeatureBits));
  const Selection s = select(device, static_cast<DType>(dtype), head_dim_qk, head_dim_v, static_cast<MaskKind>(mask),
                             static_cast<Layout>(layout), backward ? Direction::kBackward : Direction::kForward,
                             backward == 2, static_cast<unsigned>(features));
  if (s.family == nullptr) return py::make_tuple(py::none(), 0, -1, 0, s.reasons);
  return py::make_tuple(s.family->name, s.bucket, s.tile.tile, s.tile.smem_bytes, py::none());
}

// The decode path's plan for one call: (family or None, num_splits, o_accum_bytes, lse_accum_bytes,
// reasons or None). Shapes only: Python caches it per shape and allocates the workspace.
py::tuple decode_plan_tuple(int device, int dtype, py::tuple sizes, int mask, bool kv_cache, int num_splits,
                            unsigned features) {
  if (dtype != 0 && dtype != 1) throw std::invalid_argument("dtype=" + std::to_string(dtype) + ": must be 0 or 1");
  if (mask < 0 || mask > 3) throw std::invalid_argument("mask=" + std::to_string(mask) + ": must be 0..3");
  PyObject* t = tuple_arg(sizes, 7, "sizes");
  const DecodeShape shape{int32_item(t, 0, "batch"),    int32_item(t, 1, "heads_q"),     int32_item(t, 2, "heads_kv"),
                          int32_item(t, 3, "seqlen_q"), int32_item(t, 4, "seqlen_k"),    int32_item(t, 5, "head_dim_qk"),
                          int32_item(t, 6, "head_dim_v")};
  const DecodePlan plan =
      decode_plan(device, static_cast<DType>(dtype), shape, static_cast<MaskKind>(mask), kv_cache, num_splits, features);
  if (plan.family == nullptr) return py::make_tuple(py::none(), 0, 0, 0, plan.reasons);
  return py::make_tuple(plan.family->name, plan.num_splits, plan.o_accum_bytes, plan.lse_accum_bytes, py::none());
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
  m.def("capabilities", &capabilities_dict,
        "{'families': one dict per compiled kernel family, 'reason': why there is none (or None)}.");
  m.def("select", &select_tuple, py::arg("device_index"), py::arg("dtype"), py::arg("head_dim_qk"), py::arg("head_dim_v"),
        py::arg("mask"), py::arg("varlen"), py::arg("backward"), py::arg("features") = 0,
        "(family or None, head-dim bucket, tile, shared memory bytes, reasons or None) for one problem on a device.\n"
        "dtype: 0 float16, 1 bfloat16; mask: 0 none, 1 causal_top_left, 2 causal_bottom_right, 3 window;\n"
        "varlen: the layout, 0 (False) dense, 1 (True) varlen, 2 decode; backward: 0 / 1, 2 deterministic;\n"
        "features: bits 1 softcap, 2 alibi, 4 sinks, 8 bias (attn_mask).");
  m.def("decode_plan", &decode_plan_tuple, py::arg("device_index"), py::arg("dtype"), py::arg("sizes"), py::arg("mask"),
        py::arg("kv_cache"), py::arg("num_splits"), py::arg("features") = 0u,
        "(family or None, num_splits, o_accum_bytes, lse_accum_bytes, reasons or None) of the decode path.\n"
        "sizes = (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim_qk, head_dim_v); kv_cache: a KV-cache call\n"
        "(always the decode kernel), else dense (seqlen_q <= 16 only); num_splits: 0 = heuristic, 1..128 forced;\n"
        "features: as select's (8: a masked call's bias; the family's decode_features).");
  m.attr("MAX_SPLITS") = kMaxSplits;
  m.attr("DECODE_MAX_SEQLEN_Q") = kDecodeMaxSeqlenQ;
  // The C++ routers' entry points (router_table.h): the table's address, handed by Python to the
  // router library, which checks ROUTER_TABLE_VERSION against its own before reading it.
  m.def("router_table", [] { return reinterpret_cast<uintptr_t>(&router_table()); },
        "Address of this build's RouterTable (backend/include/flashsdpa/router_table.h).");
  m.attr("ROUTER_TABLE_VERSION") = kRouterTableVersion;
  m.def("fwd", [](py::handle spec) { fwd(fwd_spec(spec)); }, py::arg("spec"),
        "Forward attention: writes out and lse. spec: see module.cpp's fwd_spec.");
  m.def(
      "fwd_family",
      [](py::handle spec) {
        const FwdFamily f = fwd_family(fwd_spec(spec));
        return py::make_tuple(f.name, f.yielded.empty() ? py::object(py::none()) : py::object(py::str(f.yielded)));
      },
      py::arg("spec"),
      "(family, why or None): the kernel family a forward of this spec runs on, and the speed rule's reason\n"
      "where a family that takes it handed it on (the capability row's fwd_yields).");
  m.def("fwd_workspace_bytes", [](py::handle spec) { return fwd_workspace_bytes(fwd_spec(spec)); }, py::arg("spec"),
        "The workspace bytes the forward of this spec can use (the sm90 family's dynamic schedule or split tail),\n"
        "0 = none: pass that many bytes as the spec's workspace / workspace_bytes pointers, or none.");
  // The bias summary (ops_masks.bias_cells; cuda/common/bias_cells_summary.cu): every CUDA build has
  // it; a CPU-only build checks the arguments and then raises RuntimeError (no CUDA).
  m.def(
      "bias_cells",
      [](uintptr_t bias, int32_t dtype, std::array<int64_t, 4> sizes, std::array<int64_t, 4> strides, int64_t seqlen_q,
         int64_t seqlen_k, uintptr_t cells, int64_t cells_bytes, int32_t device, uintptr_t stream) {
        bias_cells(BiasCellsSpec{bias, dtype, sizes, strides, seqlen_q, seqlen_k, cells, cells_bytes, device, stream});
      },
      py::arg("bias"), py::arg("dtype"), py::arg("sizes"), py::arg("strides"), py::arg("seqlen_q"), py::arg("seqlen_k"),
      py::arg("cells"), py::arg("cells_bytes"), py::arg("device"), py::arg("stream"),
      "Writes the uint8 summary (B, H, Qc, Kc16) of an additive bias (params.h's ScoreMods::bias_cells) in one\n"
      "launch on `stream`. bias: device address; dtype: 0 float16, 1 bfloat16, 2 float32; sizes / strides: the\n"
      "bias's own (batch, head, query, key) in elements, query 1 or seqlen_q, key 1 or seqlen_k; cells: a\n"
      "contiguous uint8 buffer of cells_bytes >= B H Qc Kc16 bytes, Qc = 1 (query size 1) or ceil(seqlen_q / 64),\n"
      "Kc16 = ceil(seqlen_k / 256) * 16.");
  m.def("bwd", [](py::handle spec, py::handle grads) { bwd(bwd_spec(spec, grads)); }, py::arg("spec"), py::arg("grads"),
        "Backward attention: writes dq, dk, dv into caller-allocated buffers. See module.cpp's bwd_spec.");
}
