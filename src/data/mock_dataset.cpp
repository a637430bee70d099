// Implementation of data/mock_dataset.h.
#include "data/mock_dataset.h"

#include <fmt/format.h>

#include "base/error.h"

namespace tripod::data {
namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

MockGPTDataset::MockGPTDataset(int64_t num_samples, int64_t seq_length, int64_t vocab_size,
                               uint64_t seed)
    : num_samples_(num_samples), seq_length_(seq_length), vocab_size_(vocab_size), seed_(seed) {
  TRIPOD_CHECK_HINT(vocab_size >= 2, "pass --vocab-size N (N >= 2) with --mock-data",
                    "--mock-data needs a vocabulary of at least 2 tokens, got {}", vocab_size);
  TRIPOD_CHECK(seq_length >= 1, "--seq-length must be positive, got {}", seq_length);
}

void MockGPTDataset::get(int64_t index, int32_t* out) const {
  TRIPOD_CHECK(index >= 0 && index < num_samples_, "mock sample {} out of range [0, {})", index,
               num_samples_);
  uint64_t h = splitmix64(seed_ ^ splitmix64(static_cast<uint64_t>(index)));
  const int64_t a = 1 + static_cast<int64_t>(h % 4);           // 4 multipliers
  const int64_t c = 1 + static_cast<int64_t>((h >> 8) % 4);    // 4 offsets
  int64_t t = static_cast<int64_t>((h >> 16) % static_cast<uint64_t>(vocab_size_));
  for (int64_t k = 0; k <= seq_length_; ++k) {
    out[k] = static_cast<int32_t>(t);
    t = (a * t + c) % vocab_size_;
  }
}

std::string MockGPTDataset::describe() const {
  return fmt::format("mock data: {} samples of {} tokens, vocab {}", num_samples_,
                     seq_length_ + 1, vocab_size_);
}

}  // namespace tripod::data
