// The key/value cache of autoregressive decoding (Megatron-core's
// StaticInferenceContext: a key_value_memory_dict per layer and the
// sequence_len_offset) and the forward step that uses it.
//
// Without a cache every new token runs the whole sequence through the model
// again: T steps cost O(T^2) token-layers. With it the prompt runs once
// (prefill) and each new token runs alone, its query attending over the
// keys and values every earlier token left in the cache:
//   prefill   tokens [0, n): attention_forward over the n rows (causal), as
//             the whole-sequence forward; their K/V columns copied into the
//             cache (attention_kv_copy)
//   decode    token p: RoPE at position p (Llama) or the learned position
//             row p (GPT-2), its K/V appended at row p, then one
//             attention_block_forward of its query against cache rows
//             [0, p] (a non-causal block: every row is in the past)
// Every other piece is the layer's own op on fewer rows (model/
// transformer_layer.cpp at tp 1, without dropout), so the cached step runs
// on every backend through backend ops. The CPU reference computes each
// query row's attention exactly as the whole-sequence kernel does; the
// logits differ from a full recompute only by the GEMM's rounding on one
// row instead of T (tests/cli/test_generate_cli.cpp: ids equal, logits
// within 1e-6).
//
// Cache layout per layer: (max_sequence_length, 2 * G * HS) = [K | V] of
// the G K/V heads (query groups under GQA), rows in position order, in the
// compute dtype: 2 * layers * G * HS * length elements in all.
//
// Relates to: generate/generate.h, model/transformer_layer.h, backend/ops.h
// (attention_kv_copy, attention_block_forward).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/gpt_model.h"

namespace tripod::generate {

class InferenceContext {
 public:
  // Why the cached step cannot run this model on this backend ("": it can):
  // MoE layers (token routing over the whole batch), FP8 layers, or a head
  // size above the CUDA block-attention kernels' limit.
  static std::string unsupported(model::GptModel& model);

  // A cache with room for max_sequence_length tokens (at most the model's
  // max_position_embeddings) on the model's backend, in its compute dtype.
  InferenceContext(model::GptModel& model, int64_t max_sequence_length);
  ~InferenceContext();
  InferenceContext(const InferenceContext&) = delete;
  InferenceContext& operator=(const InferenceContext&) = delete;

  // Runs tokens (n ids, host) at positions [sequence_len_offset(), + n)
  // through the model, appends their keys and values to the cache, and
  // writes the logits (vocab_size, f32) of the last of them to `logits`
  // (host). The first call (the prompt) may pass any n; later calls one
  // token each.
  void forward(const int32_t* tokens, int64_t n, float* logits);

  int64_t sequence_len_offset() const { return offset_; }
  int64_t max_sequence_length() const { return max_len_; }
  size_t cache_bytes() const;

 private:
  struct Rows;  // the activation buffers of one step of n rows
  Rows& rows(int64_t n);
  void layer_forward(size_t layer, Rows& r, int64_t n);

  model::GptModel& model_;
  backend::Backend& be_;
  int64_t max_len_, offset_ = 0;
  std::vector<Tensor> kv_;          // per layer (max_len, 2*G*HS)
  std::vector<std::unique_ptr<Rows>> rows_;  // by step size (the prompt's, then 1)
  Tensor lnf_, lnf_mean_, lnf_rstd_, logits_, logits_f32_, host_logits_;
};

}  // namespace tripod::generate
