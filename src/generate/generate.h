// Text generation from a checkpoint (`tripod generate`): the model at tp 1
// on one process (CPU or GPU), weights resharded from any saved layout,
// autoregressive sampling with greedy / temperature / top-k / top-p.
//
// Decoding: with the KV cache (default; generate/inference_context.h) the
// prompt runs through the model once and each new token alone; without it
// (--no-kv-cache, or a model the cache does not take: MoE, FP8) every step
// runs the whole sequence again. Both give the same ids: the logits differ
// by GEMM rounding only. The sequence (prompt + new tokens) must fit the
// model's max_position_embeddings: positions beyond the trained ones are
// not extrapolated, and no window slides.
//
// Determinism: the draw at step i is uniform01(mix64(seed, 0x5EED), i) from
// the counter-based generator in backend/philox.h, so the same checkpoint,
// prompt and seed give the same text on every machine and thread count.
//
// Relates to: cli/generate.cpp, ckpt/reshard.h, model/gpt_model.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt_model.h"

namespace tripod::generate {

struct SamplingOptions {
  int64_t max_new_tokens = 64;  // --max-new-tokens
  float temperature = 1.0f;     // --temperature
  int64_t top_k = 0;            // --top-k (0: off)
  float top_p = 1.0f;           // --top-p (1: off)
  bool greedy = false;          // --greedy: argmax (temperature, top-k, top-p ignored)
  uint64_t seed = 1234;         // --seed
  int32_t stop_token = -1;      // end-of-document id (-1: never stop early)
};

// Index of the next token from the logits (V) of the last position.
// `step` selects the random draw (see the determinism note above).
int32_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& o, int64_t step);

struct DecodeOptions {
  bool kv_cache = true;                    // --no-kv-cache: false
  std::vector<float>* step_logits = nullptr;  // when set: the logits (vocab) of every step, appended
};

// What a generate() call did, for the closing log line.
struct DecodeStats {
  int64_t prompt_tokens = 0, new_tokens = 0;
  double prefill_seconds = 0;  // the prompt's forward (and the first new token's logits)
  double decode_seconds = 0;   // every later step
  bool kv_cache = false;       // whether the cache ran
  std::string no_cache_reason;  // why not, when it was asked for
  double total_seconds() const { return prefill_seconds + decode_seconds; }
};

// Appends up to max_new_tokens ids to `ids` (which holds the prompt).
// Refuses, naming --max-new-tokens, when the prompt plus max_new_tokens
// exceed the model's max_position_embeddings.
DecodeStats generate(model::GptModel& model, std::vector<int32_t>& ids, const SamplingOptions& o,
                     const DecodeOptions& d = {});

// The logits (T, vocab_size) of every position of `ids` (at most
// max_position_embeddings tokens), host f32, from one forward.
Tensor sequence_logits(model::GptModel& model, const std::vector<int32_t>& ids);

}  // namespace tripod::generate
