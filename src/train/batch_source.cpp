// Implementation of train/batch_source.h.
#include "train/batch_source.h"

#include <vector>

#include "base/error.h"

namespace tripod::train {

BatchSource::BatchSource(const data::TokenDataset& dataset, int64_t first_sample, int dp_rank, int dp_size,
                         int64_t micro_batch_size, model::CpChunks cp)
    : dataset_(&dataset), first_sample_(first_sample), dp_rank_(dp_rank), dp_size_(dp_size),
      micro_batch_size_(micro_batch_size), cp_(cp) {}

void BatchSource::load(int m, Tensor& tokens, Tensor& targets) const {
  TRIPOD_CHECK(dataset_, "no dataset to load micro-batch {} from", m);
  const data::TokenDataset& ds = *dataset_;
  const int64_t first = sample_offset(m);
  const int64_t B = tokens.size(0), T = tokens.size(1), S = ds.sample_length();
  if (cp_.cp_size > 1) {  // two chunks of c tokens per sample, each with its c targets: c + 1 tokens read
    TRIPOD_CHECK(S == cp_.seq_length + 1 && T == cp_.local_length(),
                 "dataset samples have {} tokens, expected --seq-length + 1 = {} ({} per context-parallel rank)", S,
                 cp_.seq_length + 1, T);
    const int64_t c = cp_.chunk();
    std::vector<int32_t> piece(static_cast<size_t>(c + 1));
    for (int64_t b = 0; b < B; ++b)
      for (int h = 0; h < 2; ++h) {
        ds.get_range((first + b) % ds.num_samples(), cp_.half_start(h), c + 1, piece.data());
        for (int64_t t = 0; t < c; ++t) {
          tokens.data<int32_t>()[b * T + h * c + t] = piece[size_t(t)];
          targets.data<int32_t>()[b * T + h * c + t] = piece[size_t(t + 1)];
        }
      }
    return;
  }
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
