// --qk-layernorm (Megatron-core's q_layernorm / k_layernorm, Qwen3's
// q_norm / k_norm): after the qkv projection and before RoPE, each
// query head and each key head of each token is normalised over its HS
// elements by a norm of --normalization's kind, whose weight (and bias) of
// HS elements the heads share; value heads are untouched.
//
// It reuses the LayerNorm / RMSNorm ops on (rows, HS) views: the local qkv
// (N, (NH_tp + 2 G_tp) HS) = [Q_tp | K_tp | V_tp] per token, seen as
// (N H, HS) rows with H = NH_tp + 2 G_tp, is gathered into [q rows | k rows]
// (contiguous, the norm's input, kept for backward), the two norms write
// [q | k] beside the gathered v rows, and one more gather with the inverse
// row map puts the three back in qkv's order. Backward runs the same way on
// dqkv. Every op is an existing one (gather_rows, the norms), so the CUDA
// backend needs no kernel of its own.
//
// Under tensor parallelism each rank holds the whole weights (heads are
// split, HS is not) and normalises its own heads: the weights' gradients are
// partial sums, all-reduced over tp with the sequence-parallel LayerNorm
// gradients (GptModel::has_partial_sp_grad).
//
// Relates to: model/transformer_layer.cpp (the call sites), model/workspace.h
// (the row maps and scratch), generate/inference_context.cpp.
#pragma once

#include <cstdint>

#include "backend/ops.h"
#include "config/gpt_config.h"
#include "model/param_table.h"

namespace tripod::model {

// The row maps of one (N, H HS) qkv seen as (N H, HS), i32 on the device.
struct QkNormRows {
  int64_t rows_q = 0, rows_k = 0;  // N NH_tp, N G_tp
  Tensor qk;       // (rows_q + rows_k): the q heads' rows in token order, then the k heads'
  Tensor v;        // (rows_k): the v heads' rows
  Tensor inverse;  // (N H): row r of qkv is row inverse[r] of [q | k | v]
  static QkNormRows make(backend::Backend& be, int64_t N, int64_t nh, int64_t g);
};

// What forward keeps for backward: the q and k heads before the norm
// (rows_q + rows_k, HS) in the compute dtype, and the statistics
// (backend::stat_dtype; mean only for LayerNorm).
struct QkNormActs {
  Tensor in, mean, rstd;
  static QkNormActs make(backend::Backend& be, const config::GptConfig& c, int64_t N, int64_t nh, int64_t g,
                         DType compute);
};

struct QkNormWeights {
  Param* q_weight = nullptr;
  Param* q_bias = nullptr;  // LayerNorm only
  Param* k_weight = nullptr;
  Param* k_bias = nullptr;
};

// qkv (.., H HS) in place; scratch (N H, HS) in the compute dtype.
void qk_norm_forward(backend::Backend& be, const config::GptConfig& c, const QkNormWeights& w,
                     const QkNormRows& rows, Tensor& qkv, QkNormActs& acts, Tensor& scratch);
// dqkv (.., H HS) in place: d/d the q and k heads before the norm, v's
// gradient kept; the weights' gradients accumulate (+=). dout (rows_q +
// rows_k, HS) and scratch (N H, HS) are scratch in the compute dtype.
void qk_norm_backward(backend::Backend& be, const config::GptConfig& c, const QkNormWeights& w,
                      const QkNormRows& rows, Tensor& dqkv, const QkNormActs& acts, Tensor& dout, Tensor& scratch);

}  // namespace tripod::model
