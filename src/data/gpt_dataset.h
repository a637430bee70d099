// GPT datasets over Megatron .bin/.idx files with Megatron-Core's sampling
// semantics (megatron/core/datasets/gpt_dataset.py, helpers.cpp,
// blended_dataset.py, blended_megatron_dataset_builder.py):
//
//  - --split "969,30,1" cuts the *documents* of each file into contiguous
//    train/valid/test ranges (Megatron's _get_split_indices).
//  - A split needing N samples of T+1 tokens takes E epochs, the fewest with
//    E * tokens_per_epoch >= N*T + 1 (also when one epoch holds less than a
//    sample). The document order is all E epochs
//    concatenated and shuffled with numpy.random.RandomState(seed); when the
//    last epoch would be used for less than 80% of its samples it is shuffled
//    separately (Megatron's separate_final_epoch).
//  - Sample i is tokens [i*T, i*T + T + 1) of that document stream: samples
//    overlap by one token and span document boundaries (build_sample_idx).
//  - The samples are then visited in a shuffled order (shuffle_idx).
//  - Blends (--data-path 0.3 A 0.7 B, also a single weighted 1.0 A): each
//    dataset gets ceil(ceil(N * w) * 1.005) samples, the blend holds
//    sum(ceil(N * w)) and interleaves them greedily so the prefix proportions
//    track the weights (build_blending_indices).
//
// See NOTE [GPT index cache] in gpt_dataset.cpp for the on-disk cache.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/indexed_dataset.h"

namespace tripod::data {

// numpy.random.RandomState's legacy MT19937 stream and shuffle, bit-exact, so
// document and sample orders equal Megatron's for the same seed.
class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed);
  uint32_t next_uint32();
  uint64_t random_interval(uint64_t max);  // uniform in [0, max]
  template <typename T>
  void shuffle(std::span<T> v) {
    for (size_t i = v.size(); i-- > 1;) std::swap(v[i], v[random_interval(i)]);
  }

 private:
  uint32_t mt_[624];
  int pos_;
};

// Megatron's split string ("969,30,1", "98,2,0", "1") -> document boundaries
// [0, b1, b2, num_documents] (4 entries; a split may be empty). Boundary i is
// round(cumulative normalised share i * num_documents), half to even
// (Megatron-Core's split matrix).
std::vector<int64_t> split_document_ranges(const std::string& split, int64_t num_documents);

// numpy.sum of a float64 array (its pairwise summation order) and
// Megatron's normalize (w / numpy.sum(w)), so that weights and split shares
// round the same way in the last bit.
double numpy_sum(std::span<const double> v);
std::vector<double> numpy_normalize(std::span<const double> v);

struct GPTIndices {
  std::vector<int32_t> doc_idx;      // (sum over epochs of #documents,) document ids
  std::vector<int64_t> sample_idx;   // (num_samples + 1, 2): (position in doc_idx, token offset)
  std::vector<int64_t> shuffle_idx;  // (num_samples,) sample visiting order
  int64_t num_epochs = 0;
};

// The three index arrays for documents [doc_begin, doc_end) of `sizes`.
// num_samples <= 0 means one epoch.
GPTIndices build_gpt_indices(const int32_t* sizes, int64_t doc_begin, int64_t doc_end,
                             int64_t seq_length, int64_t num_samples, uint32_t seed);

class GPTDataset final : public TokenDataset {
 public:
  GPTDataset(std::shared_ptr<const IndexedDataset> data, std::string split_name,
             GPTIndices indices, int64_t seq_length, int64_t doc_begin, int64_t doc_end);
  int64_t num_samples() const override;
  int64_t sample_length() const override { return seq_length_ + 1; }
  void get(int64_t index, int32_t* out) const override;
  void get_range(int64_t index, int64_t begin, int64_t count, int32_t* out) const override;
  std::string describe() const override;
  const GPTIndices& indices() const { return indices_; }

 private:
  std::shared_ptr<const IndexedDataset> data_;
  std::string split_name_;
  GPTIndices indices_;
  int64_t seq_length_, doc_begin_, doc_end_;
};

// Weighted blend of datasets with the same sample length.
class BlendedDataset final : public TokenDataset {
 public:
  BlendedDataset(std::vector<std::unique_ptr<TokenDataset>> datasets, std::vector<double> weights,
                 int64_t size);
  int64_t num_samples() const override { return size_; }
  int64_t sample_length() const override { return datasets_[0]->sample_length(); }
  void get(int64_t index, int32_t* out) const override;
  void get_range(int64_t index, int64_t begin, int64_t count, int32_t* out) const override;
  std::string describe() const override;
  // Which dataset and which of its samples blend sample i comes from.
  int32_t dataset_index(int64_t i) const { return dataset_index_[i]; }
  int64_t dataset_sample_index(int64_t i) const { return dataset_sample_index_[i]; }

 private:
  std::vector<std::unique_ptr<TokenDataset>> datasets_;
  std::vector<double> weights_;
  int64_t size_;
  std::vector<int32_t> dataset_index_;         // (size,)
  std::vector<int64_t> dataset_sample_index_;  // (size,)
};

// Parses --data-path: ["PREFIX"] or ["W1", "P1", "W2", "P2", ...] -> weights
// normalised to sum 1 and prefixes.
void parse_data_path(const std::vector<std::string>& data_path, std::vector<double>* weights,
                     std::vector<std::string>* prefixes);

DatasetSplits build_indexed_gpt_datasets(const DataConfig& config);

}  // namespace tripod::data
