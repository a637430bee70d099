// Pieces shared by the cuDNN attention graphs (cudnn_attention.cpp: bf16/f16;
// cudnn_attention_fp8.cpp: FP8): the (B, heads, rows, D) views of qkv, the
// causal mask's sub-graph and the device's workspace. Internal to backend/cuda.
#pragma once

#if TRIPOD_HAVE_CUDNN_GRAPH

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/cudnn_graph.h"

namespace tripod::backend::cuda::cudnn_sdpa {

using cudnn::Graph;

using Dims = std::vector<int64_t>;

// H query heads against G K/V heads of size D: Tq query rows, Tk K/V rows.
// The strides (4-d, of the (B, heads, rows, D) views) say where each tensor
// lives: self-attention reads Q, K, V from qkv (B, T, H + 2G, D) and writes
// dQ, dK, dV into dqkv alike (self()); context parallelism's block attention
// reads a window of qkv's Q rows and one of kv's (B, Tk, 2G, D) rows and
// writes its gradients into compact scratch (cudnn_attention_block_*).
struct Shapes {
  int64_t B, Tq, Tk, H, G, D;
  bool causal = true;  // row >= col kept (Tq == Tk)
  Dims q_str, kv_str, o_str, stats_str, dq_str, dkv_str;  // Q; K and V; O and dO; stats; dQ; dK and dV

  static Shapes self(int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
    const int64_t W = (H + 2 * G) * D, C = H * D;
    Dims in = {T * W, D, W, 1};
    return {B, T, T, H, G, D, true, in, in, {T * C, D, C, 1}, {H * T, T, 1, 1}, in, in};
  }
  static Dims t(const Dims& s) { return {s[0], s[1], s[3], s[2]}; }  // the last two dims swapped
  Dims q_dims() const { return {B, H, Tq, D}; }                      // Q, O, dO, dQ
  Dims kv_dims() const { return {B, G, Tk, D}; }                     // K, V, dK, dV
  Dims kv_t_dims() const { return {B, G, D, Tk}; }                   // K^T, V^T
  Dims full_dims() const { return {B, H, Tk, D}; }                   // per-query-head dK, dV (GQA)
  Dims full_strides() const { return {H * Tk * D, Tk * D, D, 1}; }
  Dims row_dims() const { return {B, H, Tq, 1}; }
  Dims row_strides() const { return {H * Tq, Tq, 1, 1}; }            // virtual rows, the rowsum scratch
  Dims s_dims() const { return {B, H, Tq, Tk}; }
  Dims s_strides() const { return {H * Tq * Tk, Tq * Tk, Tk, 1}; }
  Dims st_dims() const { return {B, H, Tk, Tq}; }                    // S^T view
  Dims st_strides() const { return {H * Tq * Tk, Tq * Tk, 1, Tk}; }
  std::vector<int64_t> signature() const {
    std::vector<int64_t> v = {B, Tq, Tk, H, G, D, causal ? 1 : 0};
    for (const Dims* d : {&q_str, &kv_str, &o_str, &stats_str, &dq_str, &dkv_str}) v.insert(v.end(), d->begin(), d->end());
    return v;
  }
};

// The masked score: -inf (the lowest finite float before cuDNN 9.10).
float masked_value();

// Causal mask on score tensor s (F32 [B,H,Tq,Tk]); see cudnn_attention.cpp.
int64_t causal_mask(Graph& g, const Shapes& sh, int64_t s, int variant);

// Logs a built plan's description (log::info; kept out of this header).
void log_plan(const std::string& message);

// The device's cuDNN workspace, grown as needed (cached allocator; kept).
void* workspace(int device, size_t bytes, cudaStream_t stream);

// The plan of `key` from `cache`, built on first use: build(variant) for
// each variant in turn until one's graph finalizes into a plan (describe
// (plan, variant) is logged); failures are cached too. P has members
// `std::unique_ptr<Graph> graph` and `std::string error`. nullptr, with
// every variant's reason in *why, when none builds.
template <typename P, typename K>
const P* cached_plan(std::mutex& mu, std::map<K, P>& cache, const K& key, int variants,
                     const std::function<P(int)>& build, const std::function<std::string(const P&, int)>& describe,
                     std::string* why) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it == cache.end()) {
    P p;
    std::string errors;
    for (int variant = 0; variant < variants; ++variant) {
      try {
        p = build(variant);
        if (!p.graph) continue;  // not a variant of this graph
        p.graph->build(cudnn::handle_for_current_device());
        log_plan(describe(p, variant));
        errors.clear();
        break;
      } catch (const cudnn::GraphError& e) {
        p.graph.reset();
        errors += std::string(errors.empty() ? "" : " | ") + "variant " + std::to_string(variant) + ": " + e.what();
      }
    }
    p.error = errors;
    it = cache.emplace(key, std::move(p)).first;
  }
  if (!it->second.error.empty()) {
    if (why) *why = it->second.error;
    return nullptr;
  }
  return &it->second;
}

}  // namespace tripod::backend::cuda::cudnn_sdpa

#endif  // TRIPOD_HAVE_CUDNN_GRAPH
