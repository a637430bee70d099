// What the trainer reads: fixed-length samples of seq_length + 1 tokens
// (inputs are [0, T), targets are [1, T+1)), indexed 0..num_samples-1.
// Implementations: MockGPTDataset (--mock-data) and GPTDataset over Megatron
// .bin/.idx files (--data-path), optionally blended.
#pragma once

#include <algorithm>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tripod::data {

class TokenDataset {
 public:
  virtual ~TokenDataset() = default;
  virtual int64_t num_samples() const = 0;
  virtual int64_t sample_length() const = 0;  // seq_length + 1
  // Writes sample_length() token ids to out. index in [0, num_samples()).
  virtual void get(int64_t index, int32_t* out) const = 0;
  // Tokens [begin, begin + count) of sample index (context parallelism reads
  // only its chunks of each sample). Default: get() then the copy.
  virtual void get_range(int64_t index, int64_t begin, int64_t count, int32_t* out) const {
    std::vector<int32_t> all(static_cast<size_t>(sample_length()));
    get(index, all.data());
    std::copy_n(all.data() + begin, count, out);
  }
  virtual std::string describe() const = 0;   // one line for the start-up log
};

// What build_gpt_datasets needs to know (Megatron's argument names).
struct DataConfig {
  bool mock_data = false;
  int64_t vocab_size = 0;           // mock data: ids drawn in [0, vocab_size)
  std::vector<std::string> data_path;  // "PREFIX" or "W1 PREFIX1 W2 PREFIX2 ..."
  std::string split = "969,30,1";  // Megatron's default
  int64_t seq_length = 0;
  uint64_t seed = 1234;
  // Samples each split must provide (Megatron: train_iters * global_batch,
  // (train_iters / eval_interval + 1) * eval_iters * global_batch, ...).
  int64_t train_samples = 0, valid_samples = 0, test_samples = 0;
  int64_t padded_vocab_size = 0;    // ids >= this are a vocab/data mismatch
  // --data-cache-path: the folder of the index caches ("": beside the data,
  // or a per-user folder when the data's is read-only; NOTE [GPT index cache]).
  std::string data_cache_path;
};

struct DatasetSplits {
  std::unique_ptr<TokenDataset> train, valid, test;  // valid/test may be null (empty split)
};

DatasetSplits build_gpt_datasets(const DataConfig& config);

}  // namespace tripod::data
