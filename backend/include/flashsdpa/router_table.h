// router_table.h: the backend entry points the C++ SDPA routers (routers/, a library of its own on
// torch's stable ABI) call, as one versioned table of plain function pointers that _C fills.
//
// Why a table rather than linking the backend into the router library: the backend's TUs pull in
// every kernel family (a second copy of the CUDA kernels, minutes of build per family and a second
// set of device caches). _C already holds them; Python hands the table's address (_C.router_table())
// to the router library once, at activation, and the library checks `version` and `size` before it
// reads anything else. Both sides are built from this header in one CMake build; a mismatch (a
// stale library next to a rebuilt _C) makes the router library refuse, and the Python routers run.
//
// Every entry is torch-free (device indices, DType codes, raw pointers), never throws (launch
// errors come back as a message) and never allocates device memory: the router library allocates
// outputs and workspaces through torch, so the caching allocator and CUDA graphs see them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace flashsdpa {

struct FwdSpec;
struct BwdSpec;
struct ProblemShape;

// Bump on any change of the struct below or of the FwdSpec / BwdSpec layout (api.h).
constexpr uint32_t kRouterTableVersion = 2;

struct RouterTable {
  uint32_t version;  // kRouterTableVersion
  uint32_t size;     // sizeof(RouterTable)
  // The build facts selection.py's dense predicate reads (_backend.DTYPE_CODES, HEAD_DIM_PAIRS):
  // bit c set when DType code c has a compiled kernel; head dims run in multiples of 8 from 8 to
  // max_head_dim (the largest compiled bucket, at most 256).
  uint32_t dtype_bits;
  int32_t max_head_dim;
  int32_t decode_max_seqlen_q;  // dense calls up to this many query rows ask for the decode kernel
  // 1 when a compiled family runs on CUDA device `device` (_backend.device_reason() is None).
  int (*device_ok)(int device);
  // The capability table's verdict for one problem (_C.select): the head-dim bucket of the family
  // that serves it, 0 when none does. layout 0 dense; backward 0 forward, 1 backward, 2
  // deterministic backward.
  int (*select_bucket)(int device, int dtype, int head_dim_qk, int head_dim_v, int mask_kind, int layout,
                       int backward);
  // The decode path's plan of a dense call (_C.decode_plan with kv_cache false and the heuristic
  // split count): 1 when a decode kernel serves it, with its split count and workspace bytes.
  // sizes = (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim_qk, head_dim_v).
  int (*decode_plan)(int device, int dtype, const int32_t* sizes, int mask_kind, int32_t* num_splits,
                     int64_t* o_accum_bytes, int64_t* lse_accum_bytes);
  // The backward's workspace bytes for a head-dim bucket (api.h's workspace_layout).
  void (*workspace_bytes)(const ProblemShape* shape, int64_t total_q, int bucket, int64_t* dq_accum_bytes,
                          int64_t* delta_bytes);
  // The forward's workspace bytes for this spec (api.h's fwd_workspace_bytes; 0 on any error: the
  // launch then says what is wrong).
  int64_t (*fwd_workspace_bytes)(const FwdSpec* spec);
  // Launches (api.h's fwd / bwd): 0 on success, else 1 with the error copied into `error`.
  int (*fwd)(const FwdSpec* spec, char* error, size_t error_size);
  int (*bwd)(const BwdSpec* spec, char* error, size_t error_size);
};

// The table of this build of _C (router_table.cpp).
const RouterTable& router_table();

}  // namespace flashsdpa
