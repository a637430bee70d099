// The Backend interface: every numeric kernel the model and the optimizer
// use, behind one abstract class. backend/cpu is the readable reference (the
// specification); backend/cuda implements the same ops with the same names.
// Pure C++: no CUDA types appear here.
//
// Conventions (all ops):
//  - Tensors are contiguous, row-major, on this backend's device.
//  - Activations may be f32, bf16 or f16 (the compute dtype), or f64 on the
//    CPU reference; statistics (mean, rstd, lse, CE max/sums/losses) are f32,
//    or f64 when the activations are f64; token ids are i32.
//  - Parameter gradients ACCUMULATE (+=), so micro-batches add up without
//    extra passes. Activation gradients OVERWRITE, except where an op says
//    "dinp +=" (layernorm_backward adds into the residual-stream gradient,
//    as llm.c does).
//  - Ops are enqueued in order on the backend's stream; results are visible
//    to later ops. Host reads go through copy() + synchronize().
//  - Shape letters: N rows (= B*T), C width, OC output width, V_tp local
//    vocab rows, NH_tp local heads, HS head size. See model/gpt_config.h.
//
// Usage:
//   auto be = make_cpu_backend();
//   Tensor y = be->empty({N, OC}, DType::F32);
//   be->matmul_forward(y, x, w, &b);
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tensor/tensor.h"

namespace tripod::backend {

struct AdamWStep {
  float lr = 0.f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0.f;  // decoupled (AdamW): p -= lr * wd * p
  int64_t step = 1;          // 1-based, for bias correction
  float grad_scale = 1.f;    // gradients are multiplied by this first (clipping, loss-scale undo)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;  // "cpu", "cuda:0 (NVIDIA H200)"

  // ---- memory ----
  // Allocate on this device (contents undefined).
  virtual Tensor empty(const Shape& shape, DType dtype) = 0;
  virtual void zero(Tensor& t) = 0;
  // Copy between any two tensors of equal numel and dtype, host or device.
  virtual void copy(Tensor& dst, const Tensor& src) = 0;
  // dst = src converted to dst's dtype (f32 <-> bf16/f16, round to nearest even).
  virtual void cast(Tensor& dst, const Tensor& src) = 0;
  virtual void synchronize() = 0;
  // The queue this backend's work runs on, for device communicators to
  // order their collectives after (a cudaStream_t on CUDA; null on CPU).
  virtual void* native_stream() const { return nullptr; }
  // Peak bytes held by this device's allocator since the last reset.
  virtual size_t peak_memory_bytes() const = 0;

  // ---- elementwise ----
  virtual void add(Tensor& out, const Tensor& a, const Tensor& b) = 0;  // out = a + b; out may alias a or b
  virtual void scale(Tensor& t, float s) = 0;                            // t *= s
  virtual void add_bias(Tensor& out, const Tensor& bias) = 0;           // out(N, OC) += bias(OC)

  // ---- embedding ----
  // out(B,T,C) = wte[tokens - vocab_start] (+ wpe[t] when wpe is given).
  // Tokens outside [vocab_start, vocab_start + V_tp) give a zero row: the
  // vocab-parallel embedding of Megatron, whose partial rows the tp group sums.
  virtual void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte,
                                 const Tensor* wpe, int64_t vocab_start) = 0;
  // dwte += scatter of dout rows by token (local vocab range only);
  // dwpe(T,C) += sum over b of dout. Either may be null.
  virtual void embedding_backward(Tensor* dwte, Tensor* dwpe, const Tensor& dout,
                                  const Tensor& tokens, int64_t vocab_start) = 0;

  // ---- layernorm ----
  // out(N,C) = (inp - mean) * rstd * weight + bias; mean(N), rstd(N) saved (f32).
  // weight/bias: the dtype of inp, or f32 under a bf16/f16 inp (CUDA backend;
  // fp32 LayerNorm params, model/param_table.h).
  virtual void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                                 const Tensor& weight, const Tensor& bias, float eps) = 0;
  // dinp += d/dinp; dweight += ; dbias += .
  virtual void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias,
                                  const Tensor& dout, const Tensor& inp, const Tensor& weight,
                                  const Tensor& mean, const Tensor& rstd) = 0;

  // ---- matmul (linear layer) ----
  // out(N,OC) = inp(N,C) @ weight(OC,C)^T (+ bias(OC)).
  virtual void matmul_forward(Tensor& out, const Tensor& inp, const Tensor& weight,
                              const Tensor* bias) = 0;
  // dinp(N,C) = dout @ weight (overwrite); dweight(OC,C) += dout^T @ inp;
  // dbias(OC) += column sums of dout. Any of the three may be null.
  virtual void matmul_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias,
                               const Tensor& dout, const Tensor& inp, const Tensor& weight) = 0;

  // ---- GELU (tanh approximation, as GPT-2 and Megatron's gelu_impl) ----
  virtual void gelu_forward(Tensor& out, const Tensor& inp) = 0;
  virtual void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) = 0;  // overwrite

  // ---- causal self-attention ----
  // qkv(B,T,3*C_tp) holds [Q | K | V], each (B,T,NH_tp,HS). out(B,T,C_tp) =
  // softmax(Q K^T / sqrt(HS), causal) V per head; lse(B,NH_tp,T) (f32) saves
  // the log-sum-exp of each softmax row, so backward needs no T x T buffer.
  virtual void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int n_head) = 0;
  // dqkv(B,T,3*C_tp) overwrite.
  virtual void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                  const Tensor& out, const Tensor& lse, int n_head) = 0;

  // ---- dropout (counter-based: the mask is recomputed from seed, never stored) ----
  // out = inp * keep / (1 - p), keep = hash(seed, offset + element index) >= p.
  virtual void dropout_forward(Tensor& out, const Tensor& inp, float p, uint64_t seed,
                               uint64_t offset) = 0;
  virtual void dropout_backward(Tensor& dinp, const Tensor& dout, float p, uint64_t seed,
                                uint64_t offset) = 0;

  // ---- vocab-parallel softmax cross-entropy (never materialises probabilities) ----
  // With tp > 1 the caller all-reduces between the steps (Megatron's
  // _VocabParallelCrossEntropy): max(MAX) after step 1, sums(SUM) after step 2.
  // 1. row_max(N) = max_j logits(N,V_tp)[j]
  virtual void ce_row_max(Tensor& row_max, const Tensor& logits) = 0;
  // 2. sums(2,N): sums[0] = sum_j exp(logits - row_max), sums[1] = logit of
  //    the target when it lies in [vocab_start, vocab_start+V_tp), else 0.
  virtual void ce_row_sums(Tensor& sums, const Tensor& logits, const Tensor& row_max,
                           const Tensor& targets, int64_t vocab_start) = 0;
  // 3. losses(N) = log(sums[0]) + row_max - sums[1]
  virtual void ce_loss(Tensor& losses, const Tensor& sums, const Tensor& row_max) = 0;
  // dlogits(N,V_tp) = dloss * (softmax - onehot(target)); may alias logits.
  virtual void ce_backward(Tensor& dlogits, const Tensor& logits, const Tensor& row_max,
                           const Tensor& sums, const Tensor& targets, int64_t vocab_start,
                           float dloss) = 0;

  // ---- optimizer ----
  // AdamW on f32 master weights; param, grad, m, v all f32, same numel.
  virtual void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                            const AdamWStep& step) = 0;
  // acc(1) f32 += sum of x^2 (accumulated in at least f32; f64 on cpu).
  virtual void sum_squares(Tensor& acc, const Tensor& x) = 0;
};

std::unique_ptr<Backend> make_cpu_backend();

// CPU threads (OpenMP and OpenBLAS) per process: OMP_NUM_THREADS when set,
// else the cores divided among the ranks on this node (as torchrun does), so
// 8 ranks on 2 cores do not spin 16 threads against each other. Returns the
// number chosen.
int configure_cpu_threads(int local_world_size);

}  // namespace tripod::backend
