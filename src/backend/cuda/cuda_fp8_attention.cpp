// The CUDA backend's FP8 attention ops (see cuda_fp8_attention.h).
#include "backend/cuda/cuda_fp8_attention.h"

#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cudnn_attention.cuh"
#include "backend/cuda/fp8.cuh"
#include "base/error.h"

namespace tripod::backend::cuda {

namespace {
constexpr const char* kHint = "leave out --fp8-dot-product-attention (attention then runs in the compute dtype)";
}  // namespace

float* Fp8AttentionRunner::amax_slots(Backend& be, cudaStream_t stream) {
  if (!amax_.defined()) amax_ = be.empty({16}, DType::F32);
  TRIPOD_CUDA_CHECK(cudaMemsetAsync(amax_.raw(), 0, 16 * sizeof(float), stream));
  return amax_.data<float>();
}

void Fp8AttentionRunner::forward(Backend& be, cudaStream_t stream, Tensor& out, Tensor& lse, const Tensor& qkv,
                                 const Fp8AttentionMeta& m, int n_head, int n_kv_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv_head);
  float* amax = amax_slots(be, stream);
  Fp8AttentionScales s;
  s.qkv_descale = m.qkv_scale_inv.data<float>();
  s.s_scale = m.s_scale.data<float>();
  s.s_descale = m.s_scale_inv.data<float>();
  s.o_scale = m.o_scale.data<float>();
  for (int i = 0; i < 4; ++i) s.amax[i] = amax + 4 * i;
  std::string why;
  const bool ran = cudnn_attention_fp8_forward(out.raw(), lse.data<float>(), qkv.raw(), B, T, n_head, n_kv_head,
                                               static_cast<int>(HS), s, stream, &why);
  TRIPOD_CHECK_HINT(ran, kHint, "attention_fp8_forward: cuDNN's FP8 attention does not serve B={} T={} heads={}/{} HS={}: {}",
                    B, T, n_head, n_kv_head, HS, why);
  fp8_amax_fold(m.s_amax.data<float>(), amax, 1, 4, stream);
  fp8_amax_fold(m.o_amax.data<float>(), amax + 4, 1, 4, stream);
  note_attention_path("attention: cuDNN FP8 flash attention (--fp8-dot-product-attention)");
}

// Grouped-query attention runs as multi-head on repeated K/V, then each
// group's dK, dV are summed: cuDNN's FP8 backward (9.19, H100) took as long
// as the bf16 one with grouped K/V and less as multi-head (bench/RESULTS.md).
// The per-head dK, dV amaxes are not the sums'; the sum kernel takes those.
void Fp8AttentionRunner::backward(Backend& be, cudaStream_t stream, float* scratch, Tensor& dqkv, const Tensor& dout,
                                  const Tensor& qkv, const Tensor& out, const Tensor& lse, const Fp8AttentionMeta& m,
                                  int n_head, int n_kv_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv_head);
  float* amax = amax_slots(be, stream);
  Fp8AttentionScales s;
  s.qkv_descale = m.qkv_scale_inv.data<float>();
  s.o_descale = m.o_scale_inv.data<float>();
  s.dout_descale = m.dout_scale_inv.data<float>();
  s.s_scale = m.s_scale.data<float>();
  s.s_descale = m.s_scale_inv.data<float>();
  s.dp_scale = m.dp_scale.data<float>();
  s.dp_descale = m.dp_scale_inv.data<float>();
  s.dqkv_scale = m.dqkv_scale.data<float>();
  for (int i = 0; i < 4; ++i) s.amax[i] = amax + 4 * i;
  const bool grouped = n_kv_head != n_head;
  const int64_t rows = B * T, wx = 3 * int64_t(n_head) * HS;
  void* qkv_in = const_cast<void*>(qkv.raw());
  void* dqkv_out = dqkv.raw();
  if (grouped) {
    if (!x_.defined() || x_.numel() < 2 * rows * wx) x_ = be.empty({2 * rows * wx}, DType::E4M3);
    qkv_in = x_.raw();
    dqkv_out = static_cast<uint8_t*>(x_.raw()) + rows * wx;
    fp8_attention_expand_kv(qkv_in, qkv.raw(), rows, n_head, n_kv_head, static_cast<int>(HS), stream);
  }
  std::string why;
  const bool ran = cudnn_attention_fp8_backward(dqkv_out, dqkv.dtype(), dout.raw(), qkv_in, out.raw(),
                                                lse.data<float>(), scratch, B, T, n_head,
                                                grouped ? n_head : n_kv_head, static_cast<int>(HS), s, stream, &why);
  TRIPOD_CHECK_HINT(ran, kHint, "attention_fp8_backward: cuDNN's FP8 attention does not serve B={} T={} heads={}/{} HS={}: {}",
                    B, T, n_head, n_kv_head, HS, why);
  fp8_amax_fold(m.dp_amax.data<float>(), amax, 1, 4, stream);
  fp8_amax_fold(m.dqkv_amax.data<float>(), amax + 4, grouped ? 1 : 3, 4, stream);
  if (grouped)
    fp8_attention_sum_kv_groups(dqkv.raw(), dqkv_out, dqkv.dtype(), m.dqkv_scale.data<float>(),
                                m.dqkv_amax.data<float>(), rows, n_head, n_kv_head, static_cast<int>(HS), stream);
}

}  // namespace tripod::backend::cuda
