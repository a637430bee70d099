// MockGPTDataset (--mock-data): deterministic synthetic samples that a GPT
// can learn, for smoke tests without a tokenizer or files (as Megatron's
// MockGPTDataset with its NullTokenizer).
//
// Each sample is an affine walk modulo V: t[k+1] = (a * t[k] + c) mod V,
// with t[0], a and c drawn from (seed, sample index) and a, c from a small
// set, so the next token is predictable from the previous two: the loss
// falls from ln(V) towards ~ln(#choices)/T within a few hundred steps.
#pragma once

#include "data/dataset.h"

namespace tripod::data {

class MockGPTDataset final : public TokenDataset {
 public:
  MockGPTDataset(int64_t num_samples, int64_t seq_length, int64_t vocab_size, uint64_t seed);
  int64_t num_samples() const override { return num_samples_; }
  int64_t sample_length() const override { return seq_length_ + 1; }
  void get(int64_t index, int32_t* out) const override;
  std::string describe() const override;

 private:
  int64_t num_samples_, seq_length_, vocab_size_;
  uint64_t seed_;
};

}  // namespace tripod::data
