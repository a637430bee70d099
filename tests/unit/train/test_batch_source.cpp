// train/batch_source.h: which samples each data-parallel rank reads for
// each micro-batch (Megatron's sampler order), wrapping at the end of the
// dataset, tokens [0, T) and targets [1, T+1) of each sample; and the time
// split's compute remainder (train/time_split.h).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "base/error.h"
#include "train/batch_source.h"
#include "train/time_split.h"

namespace tripod::train {
namespace {

// Sample s holds ids 1000 * s + j, j = 0..length-1: each id names its sample.
class Numbered final : public data::TokenDataset {
 public:
  Numbered(int64_t n, int64_t length) : n_(n), length_(length) {}
  int64_t num_samples() const override { return n_; }
  int64_t sample_length() const override { return length_; }
  void get(int64_t s, int32_t* out) const override {
    for (int64_t j = 0; j < length_; ++j) out[j] = static_cast<int32_t>(1000 * s + j);
  }
  std::string describe() const override { return "numbered samples"; }

 private:
  int64_t n_, length_;
};

TEST(BatchSource, MicroBatchesOfEachDataParallelRankInSamplerOrder) {
  const int64_t B = 2, T = 4, dp = 2, M = 3;
  const Numbered ds(100, T + 1);
  std::set<int64_t> seen;
  for (int d = 0; d < dp; ++d) {
    const BatchSource src(ds, 40, d, dp, B);
    for (int m = 0; m < M; ++m) {
      const int64_t first = 40 + (m * dp + d) * B;
      EXPECT_EQ(src.sample_offset(m), first) << "dp rank " << d << " micro-batch " << m;
      Tensor tokens = Tensor::empty({B, T}, DType::I32), targets = Tensor::empty({B, T}, DType::I32);
      src.load(m, tokens, targets);
      for (int64_t b = 0; b < B; ++b) {
        seen.insert(first + b);
        for (int64_t t = 0; t < T; ++t) {
          EXPECT_EQ(tokens.data<int32_t>()[b * T + t], 1000 * (first + b) + t);
          EXPECT_EQ(targets.data<int32_t>()[b * T + t], 1000 * (first + b) + t + 1);
        }
      }
    }
  }
  // The global batch is every sample of [40, 40 + dp * M * B) once.
  EXPECT_EQ(seen.size(), static_cast<size_t>(dp * M * B));
  EXPECT_EQ(*seen.begin(), 40);
  EXPECT_EQ(*seen.rbegin(), 40 + dp * M * B - 1);
}

TEST(BatchSource, WrapsAroundTheDataset) {
  const Numbered ds(5, 3);
  const BatchSource src(ds, 4, 0, 1, 2);
  Tensor tokens = Tensor::empty({2, 2}, DType::I32), targets = Tensor::empty({2, 2}, DType::I32);
  src.load(0, tokens, targets);  // samples 4 and 5 % 5 = 0
  EXPECT_EQ(tokens.data<int32_t>()[0], 4000);
  EXPECT_EQ(tokens.data<int32_t>()[2], 0);
  EXPECT_EQ(targets.data<int32_t>()[3], 2);
}

TEST(BatchSource, SampleLengthMustBeSeqLengthPlusOne) {
  const Numbered ds(5, 4);
  const BatchSource src(ds, 0, 0, 1, 1);
  Tensor tokens = Tensor::empty({1, 4}, DType::I32), targets = Tensor::empty({1, 4}, DType::I32);
  EXPECT_THROW(src.load(0, tokens, targets), Error);
}

TEST(TimeSplit, ComputeIsTheRemainderAndNeverNegative) {
  const auto t = make_time_split(10.0, 1.0, 2.0, 0.5, 1.5, 0.25);
  EXPECT_DOUBLE_EQ(t.compute_ms, 4.75);
  EXPECT_DOUBLE_EQ(t.tp_comm_ms + t.pp_wait_ms + t.dp_comm_ms + t.optimizer_ms + t.data_ms + t.compute_ms, 10.0);
  EXPECT_EQ(make_time_split(1.0, 1.0, 1.0, 0, 0, 0).compute_ms, 0.0);
}

}  // namespace
}  // namespace tripod::train
