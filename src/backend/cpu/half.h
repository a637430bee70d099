// bf16 / fp16 on the CPU backend: the emulation of the GPU's mixed
// precision, so a --bf16 or --fp16 job runs on CPU with the GPU path's
// storage roundings.
//
// An op on bf16/f16 activations reads every bf16/f16 operand widened to f32
// (exact), runs the f32 reference kernel (which accumulates in f32, as
// cuBLASLt and tripod's CUDA kernels accumulate in f32), and rounds each
// output back to its dtype once, to nearest even (f16: overflow to inf, as
// __float2half_rn). The tensors that are bf16/f16 are the ones the model
// allocates in the compute dtype, exactly as on the GPU (activations, the
// compute copies of the weights, activation gradients); the "wide" tensors
// of backend/ops.h (fp32 LayerNorm params, fp32 parameter gradients,
// statistics) stay f32 and are used in place.
//
// What this does not reproduce: rounding inside a fused CUDA kernel (the
// CPU composes fused ops from the unfused ones, so a fused op's intermediate
// is rounded here where a CUDA kernel may keep it in f32), cuDNN's bf16
// probabilities inside flash attention, and the GEMMs' summation order.
//
//   Widened w;                                       // in an _impl
//   return matmul_forward_impl(w.out(out), w.in(inp), w.in(weight), w.in(bias));
//   // w's destructor rounds the f32 result into out
#pragma once

#include <deque>
#include <utility>

#include "tensor/tensor.h"

namespace tripod::backend::cpu {

inline bool is_half(DType d) { return d == DType::BF16 || d == DType::F16; }

// dst(f32) = src(bf16/f16), exact; dst(bf16/f16) = round(src(f32)).
void widen_to_f32(Tensor& dst, const Tensor& src);
void round_from_f32(Tensor& dst, const Tensor& src);

// The f32 stand-ins of one op call's bf16/f16 tensors. in(): a read-only
// operand (a copy widened to f32; any other tensor is returned as it is).
// out(): an output, widened with its current contents (so "+=" ops and
// in-place ops see the values), rounded back into the original when the
// Widened goes out of scope, in the order the outputs were named.
class Widened {
 public:
  Widened() = default;
  Widened(const Widened&) = delete;
  Widened& operator=(const Widened&) = delete;
  ~Widened();

  const Tensor& in(const Tensor& t);
  const Tensor* in(const Tensor* t) { return t ? &in(*t) : nullptr; }
  Tensor& out(Tensor& t);
  Tensor* out(Tensor* t) { return t ? &out(*t) : nullptr; }

 private:
  std::deque<Tensor> copies_;                  // stable addresses
  std::deque<std::pair<Tensor, Tensor*>> outs_;  // (original, its f32 stand-in)
};

}  // namespace tripod::backend::cpu
