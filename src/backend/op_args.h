// The small typed arguments of backend/ops.h's ops (the block of a
// context-parallel attention, FP8 attention's scales, an AdamW step, MoE
// routing and auxiliary losses) and the layout helpers the ops' callers
// share (the statistics dtype, FP8 block scaling's block counts). Included
// by backend/ops.h; the ops' definitions are there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/tensor.h"

namespace tripod::backend {

// Context parallelism's block attention (attention_block_forward/backward):
// Q rows [q_start, q_start + q_len) against K/V rows [kv_start, kv_start +
// kv_len), each range within every batch row b. causal: a diagonal block
// (q_len == kv_len, query row i attends to K/V rows j <= i of the window);
// otherwise every query row attends to every K/V row of the window.
struct AttentionBlock {
  int64_t q_start = 0, q_len = 0;
  int64_t kv_start = 0, kv_len = 0;
  bool causal = false;
};

// The per-tensor scaling of FP8 attention (attention_fp8_forward/backward):
// one-element statistics tensors on the device (f32; f64 on the reference
// under f64 inputs). qkv: Q, K and V, cast with one scale; s: the softmax
// probabilities P (E4M3); o: the output; dout: the output's gradient; dp:
// the scores' gradient dS; dqkv: dQ, dK and dV. Each op reads the fields
// it names and leaves the others undefined if the caller wishes.
struct Fp8AttentionMeta {
  Tensor qkv_scale_inv;
  Tensor s_scale, s_scale_inv, s_amax;
  Tensor o_scale, o_scale_inv, o_amax;
  Tensor dout_scale_inv;
  Tensor dp_scale, dp_scale_inv, dp_amax;
  Tensor dqkv_scale, dqkv_amax;
};

struct AdamWStep {
  float lr = 0.f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0.f;  // decoupled (AdamW): p -= lr * wd * p
  int64_t step = 1;          // 1-based, for bias correction
  float grad_scale = 1.f;    // gradients are multiplied by this first (clipping, loss-scale undo)
};

// The router's choice (Megatron's topk_routing_with_score_function):
//   softmax, pre_softmax   probs = top-k of softmax(logits) (Qwen2-MoE: no renormalisation)
//   softmax                probs = softmax over the top-k logits (Mixtral)
//   sigmoid                s = sigmoid(logits); the top-k of s + expert_bias chosen, probs =
//                          the chosen s / (their sum + 1e-20) when k > 1 (DeepSeek-V3)
// then probs *= scaling_factor when it is not 0. Ties: the lower expert index wins.
struct MoeRouting {
  int topk = 1;
  bool sigmoid = false;
  bool pre_softmax = false;
  float scaling_factor = 0.f;  // 0: not scaled
};

// The router's auxiliary losses (Megatron's switch_load_balancing_loss_func
// and z_loss_func), over the scores s of every expert (softmax(logits), or
// sigmoid(logits) normalised to sum 1) and the top-k of s per token:
//   aux = 1/G sum_g E coeff / (k Ng^2) sum_e count_g[e] sum_{n in g} s[n, e]
// over G groups of Ng tokens: the whole micro-batch (seq_length 0), or each
// sequence of seq_length tokens (seq_aux_loss). z = z_coeff mean_n logsumexp(logits_n)^2.
struct MoeAuxLoss {
  int topk = 1;
  bool sigmoid = false;
  int64_t seq_length = 0;  // 0: one group of all N tokens
  float aux_coeff = 0.f;
  float z_coeff = 0.f;
  float grad_scale = 1.f;  // d total loss / d (aux + z)
};

// The statistics dtype of activations of dtype `act`: f64 for f64, else f32.
inline DType stat_dtype(DType act) { return act == DType::F64 ? DType::F64 : DType::F32; }

// FP8 block scaling (Backend::fp8_block_cast): the block edge, and the
// leading dimension of a 128x128 tile-scale array over K columns (cuBLASLt
// pads it to a multiple of 4).
inline constexpr int64_t kFp8Block = 128;
inline int64_t fp8_blocks(int64_t n) { return (n + kFp8Block - 1) / kFp8Block; }
inline int64_t fp8_tile_ld(int64_t K) { return (fp8_blocks(K) + 3) / 4 * 4; }

// Why FP8 GEMMs are not native on a GPU of compute capability major.minor
// ("" from sm_89, Ada and Hopper, whose tensor cores take FP8 operands):
// there the CUDA backend's FP8 GEMMs run on its fallback kernel, the same
// numerics and slower than bf16 (Backend::fp8_gemm_note).
std::string fp8_gemm_limitation(int major, int minor);
// Why cuDNN's FP8 attention (--fp8-dot-product-attention) does not serve a
// head size on a GPU of compute capability major.x with the cuDNN of this
// version loaded (cudnnGetVersion; 0: none): "" when it does. It needs cuDNN
// 9.19 or later, Hopper or later, and on Hopper head size 128.
std::string fp8_attention_limitation(size_t cudnn_version, int major, int64_t head_size);

}  // namespace tripod::backend
