// dispatch_sm90.cu: run_fwd_sm90 switches on (dtype, head-dim bucket) into the per-TU
// instantiations of the Hopper family, and fwd_sm90_unsupported says which problems it takes.
// Compiled for sm_90a only (wgmma, setmaxnreg): it runs on compute capability 9.0 and nowhere else.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "flashsdpa/kernels.h"
#include "sm90/tma_sm90.h"

namespace flashsdpa {

template <typename Elem, int kHeadDim>
cudaError_t run_fwd_sm90_(const AttnFwdParams& params, cudaStream_t stream);

namespace {

// The family's buckets are whole 128-byte column blocks (TMA boxes, wgmma K steps): 64, 128, 256,
// as far as this build compiled them (FLASHSDPA_HEAD_DIMS). A head dim runs in the smallest one
// that holds it; the columns above it are zero-filled by TMA and never stored.
int sm90_bucket(int head_dim_qk, int head_dim_v) {
  const int need = std::max(head_dim_qk, head_dim_v);
  int best = 0;
#ifdef FLASHSDPA_HDIM_256
  if (need <= 256) best = 256;
#endif
#ifdef FLASHSDPA_HDIM_128
  if (need <= 128) best = 128;
#endif
#ifdef FLASHSDPA_HDIM_64
  if (need <= 64) best = 64;
#endif
  return best;
}

bool dtype_in_build(DType dtype) {
  switch (dtype) {
#ifdef FLASHSDPA_DTYPE_FP16
    case DType::kFloat16: return true;
#endif
#ifdef FLASHSDPA_DTYPE_BF16
    case DType::kBFloat16: return true;
#endif
    default: return false;
  }
}

template <typename Elem>
cudaError_t run_elem(const AttnFwdParams& p, cudaStream_t s) {
  switch (sm90_bucket(p.head_dim_qk, p.head_dim_v)) {
#ifdef FLASHSDPA_HDIM_64
    case 64: return run_fwd_sm90_<Elem, 64>(p, s);
#endif
#ifdef FLASHSDPA_HDIM_128
    case 128: return run_fwd_sm90_<Elem, 128>(p, s);
#endif
#ifdef FLASHSDPA_HDIM_256
    case 256: return run_fwd_sm90_<Elem, 256>(p, s);
#endif
    default: return cudaErrorNotSupported;
  }
}

}  // namespace

const char* fwd_sm90_unsupported(const AttnFwdParams& p) {
  if (p.cc_major != 9) return "the sm90 family runs on compute capability 9.0 (sm_90a) only";
  if (!dtype_in_build(p.dtype)) return "dtype not compiled";
  if (sm90_bucket(p.head_dim_qk, p.head_dim_v) == 0) return "no compiled sm90 head-dim bucket holds the head dims";
  if (p.cu_seqlens_q != nullptr || p.seqused_k != nullptr) return "varlen / seqused_k: portable family";
  if (!(p.scale > 0.f)) return "softmax scale <= 0: portable family";
  if (p.seqlen_k == 0) return "no keys (a TMA descriptor needs non-empty dimensions): portable family";
  const TmaTensor4d tensors[4] = {
      {p.q, p.head_dim_qk, p.seqlen_q, p.heads_q, p.batch, p.q_row_stride, p.q_head_stride, p.q_batch_stride},
      {p.k, p.head_dim_qk, p.seqlen_k, p.heads_kv, p.batch, p.k_row_stride, p.k_head_stride, p.k_batch_stride},
      {p.v, p.head_dim_v, p.seqlen_k, p.heads_kv, p.batch, p.v_row_stride, p.v_head_stride, p.v_batch_stride},
      {p.o, p.head_dim_v, p.seqlen_q, p.heads_q, p.batch, p.o_row_stride, p.o_head_stride, p.o_batch_stride}};
  for (const TmaTensor4d& t : tensors) {
    if (!tma_compatible(t)) return "TMA needs 16-byte aligned pointers and strides: portable family";
  }
  return nullptr;
}

int run_fwd_sm90(const AttnFwdParams& params, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  switch (params.dtype) {
#ifdef FLASHSDPA_DTYPE_FP16
    case DType::kFloat16: return run_elem<__half>(params, s);
#endif
#ifdef FLASHSDPA_DTYPE_BF16
    case DType::kBFloat16: return run_elem<__nv_bfloat16>(params, s);
#endif
    default: return cudaErrorNotSupported;
  }
}

}  // namespace flashsdpa
