// Implementation of train/batch_source.h.
#include "train/batch_source.h"

#include <vector>

#include "base/error.h"

namespace tripod::train {

BatchSource::BatchSource(const data::TokenDataset& dataset, int64_t first_sample, int dp_rank, int dp_size,
                         int64_t micro_batch_size)
    : dataset_(&dataset), first_sample_(first_sample), dp_rank_(dp_rank), dp_size_(dp_size),
      micro_batch_size_(micro_batch_size) {}

void BatchSource::load(int m, Tensor& tokens, Tensor& targets) const {
  TRIPOD_CHECK(dataset_, "no dataset to load micro-batch {} from", m);
  const data::TokenDataset& ds = *dataset_;
  const int64_t first = sample_offset(m);
  const int64_t B = tokens.size(0), T = tokens.size(1), S = ds.sample_length();
  TRIPOD_CHECK(S == T + 1, "dataset samples have {} tokens, expected --seq-length + 1 = {}", S, T + 1);
  std::vector<int32_t> sample(static_cast<size_t>(S));
  for (int64_t b = 0; b < B; ++b) {
    ds.get((first + b) % ds.num_samples(), sample.data());
    for (int64_t t = 0; t < T; ++t) {
      tokens.data<int32_t>()[b * T + t] = sample[t];
      targets.data<int32_t>()[b * T + t] = sample[t + 1];
    }
  }
}

}  // namespace tripod::train
