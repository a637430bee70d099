// The micro-batches one data-parallel rank reads from one global batch
// (Megatron's data iterator over its MegatronPretrainingSampler): the global
// batch is dp_size x num_microbatches micro-batches of B consecutive samples
// starting at `first_sample`; micro-batch m of dp rank d is samples
//   first_sample + (m * dp_size + d) * B + [0, B)      (mod the dataset's size)
// Each sample is seq_length + 1 tokens: tokens are [0, T), targets [1, T+1).
// Under context parallelism each cp rank loads only its two chunks of every
// sample (model/context_parallel.h, NOTE [Load-balanced chunks]): T/cp
// tokens and their targets, reading just those tokens from the dataset.
//
// A value type: the trainer makes one per pass (training: first_sample =
// consumed samples; evaluation: it * global batch, from the start of the
// validation split each time) and hands it to the pipeline stage, which
// owns it for the pass.
//
// Relates to: train/pipeline_stage.h (reads it), data/dataset.h.
#pragma once

#include <cstdint>

#include "data/dataset.h"
#include "model/context_parallel.h"
#include "tensor/tensor.h"

namespace tripod::train {

class BatchSource {
 public:
  BatchSource() = default;
  BatchSource(const data::TokenDataset& dataset, int64_t first_sample, int dp_rank, int dp_size,
              int64_t micro_batch_size, model::CpChunks cp = {});

  // Global index of micro-batch m's first sample (also the dropout keys').
  int64_t sample_offset(int m) const {
    return first_sample_ + (static_cast<int64_t>(m) * dp_size_ + dp_rank_) * micro_batch_size_;
  }
  // Fills tokens and targets, host int32 (B, T), with micro-batch m (T the
  // local length: seq_length / cp).
  void load(int m, Tensor& tokens, Tensor& targets) const;

 private:
  const data::TokenDataset* dataset_ = nullptr;
  int64_t first_sample_ = 0;
  int dp_rank_ = 0, dp_size_ = 1;
  int64_t micro_batch_size_ = 1;
  model::CpChunks cp_;
};

}  // namespace tripod::train
