// The model shapes and layouts the plan tests use, built as the planner
// takes them: a finalized config::GptConfig and a layout whose dp comes
// from config::Layout::make.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/memory_model.h"
#include "plan/op_profile.h"

namespace tripod::plan {

// GPT-2-style (LayerNorm, learned positions, GELU, biases, tied output).
inline GptConfig gpt_model(int64_t L, int64_t C, int64_t NH, int64_t T = 1024, int64_t V = 50257) {
  GptConfig m;
  m.num_layers = L, m.hidden_size = C, m.num_attention_heads = NH, m.seq_length = T, m.vocab_size = V;
  m.finalize();
  return m;
}

// 12 layers, 768 hidden, 12 heads, seq 1024, vocab 50257 -> 50304 at tp1.
inline GptConfig gpt2_124m() { return gpt_model(12, 768, 12); }
// The Llama 3 8B layer shape of the FP8 benchmarks: 8 layers of C 4096, 32
// heads, SwiGLU F 14336, no biases, seq 8192, vocab 128256 (attention as
// GPT-2's: the memory terms these tests count do not depend on the groups).
inline GptConfig llama8b_layers() {
  GptConfig m = gpt_model(8, 4096, 32, 8192, 128256);
  m.swiglu = true, m.add_bias_linear = false, m.ffn_hidden_size = 14336;
  m.finalize();
  return m;
}

// `world` GPUs split into tp x pp x dp.
inline Layout layout(int world, int tp = 1, int pp = 1) { return Layout(config::Layout::make(world, tp, pp)); }

// The work (FLOPs or bytes) of the ops of kind k in a list, times their counts.
inline double sum_work(const std::vector<OpCount>& ops, OpKind k) {
  double w = 0;
  for (const auto& c : ops)
    if (c.op.kind == k) w += c.count * c.op.work();
  return w;
}

}  // namespace tripod::plan
