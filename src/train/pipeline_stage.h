// GptPipelineStage: the parallel::PipelineStage the schedules drive, around
// this rank's model chunks (one per virtual pipeline stage). It owns the
// activations of the (micro-batch, chunk) pairs in flight and the batch
// source of the pass (train/batch_source.h), loads each micro-batch's
// tokens/targets from it where a chunk needs them, and adds up the loss on
// the chunk that computes it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "model/gpt_model.h"
#include "parallel/pp_schedule.h"
#include "train/batch_source.h"

namespace tripod::train {

class GptPipelineStage final : public parallel::PipelineStage {
 public:
  // B: micro-batch size, T: sequence length.
  GptPipelineStage(std::vector<model::GptModel*> chunks, int64_t B, int64_t T);

  // Per iteration (or evaluation pass): gradient scale of each token's loss
  // (0 with forward-only), the dropout seed and where the pass's
  // micro-batches come from.
  void begin(bool with_grad, float dloss, uint64_t dropout_seed, BatchSource batches);
  // Data-parallel overlap hooks (distributed/distributed_data_parallel.h), per chunk c:
  // grads_ready is passed to the model's backward of micro-batch
  // last_microbatch only (the one after which gradients are final; with
  // interleaving each chunk reaches it at its own time), before_use to every
  // forward. Empty functions: no hooks.
  using ParamHook = std::function<void(int chunk, const std::vector<size_t>& params)>;
  void set_param_hooks(int last_microbatch, ParamHook grads_ready, ParamHook before_use);

  // Sum of the token losses over the last stage's micro-batches since
  // begin(). The per-micro-batch losses stay on the device until this is
  // called (one host synchronisation per iteration, not per micro-batch).
  double loss_sum();
  int64_t loss_tokens() const { return loss_tokens_; }
  size_t live_sets() const { return live_.size(); }
  size_t max_live_sets() const { return max_live_; }
  // Activation bytes of one micro-batch summed over chunks (known once each
  // chunk has run a micro-batch).
  size_t activation_bytes_per_microbatch() const;
  // Host seconds spent loading micro-batches (dataset read + host-to-device
  // copy of tokens/targets) since begin(): the "data" part of the time split.
  double data_seconds() const { return data_seconds_; }

  int num_chunks() const override { return static_cast<int>(chunks_.size()); }
  Tensor& input_tensor(int m, int c) override { return acts(m, c).input; }
  const Tensor& output_tensor(int m, int c) override { return acts(m, c).output(); }
  Tensor& output_grad(int m, int c) override;
  const Tensor& input_grad(int m, int c) override;
  void forward(int m, int c) override;
  void backward(int m, int c) override;

 private:
  struct Slot {
    model::MicroBatchActs acts;
    Tensor output_grad;  // (N_sp, C), non-last chunks
  };
  model::MicroBatchActs& acts(int m, int c) { return slot(m, c).acts; }
  Slot& slot(int m, int c);
  void release(int m, int c);

  std::vector<model::GptModel*> chunks_;
  int64_t B_, T_;
  BatchSource batches_;
  bool with_grad_ = false;
  float dloss_ = 0;
  uint64_t seed_ = 0;
  double loss_sum_ = 0;
  int64_t loss_tokens_ = 0;
  std::vector<Tensor> loss_parts_;  // (N) f32 device copies of each micro-batch's losses, reused
  size_t losses_pending_ = 0;       // entries of loss_parts_ filled since the last loss_sum()
  std::map<std::pair<int, int>, std::unique_ptr<Slot>> live_;
  std::vector<std::vector<std::unique_ptr<Slot>>> free_;  // per chunk: recycled buffers
  std::pair<int, int> pending_release_{-1, -1};
  // The input gradient of the last backward, (m, c), until it is sent: its
  // buffer is swapped out of the slot so the slot (all other activations)
  // is free for the next forward at once (NOTE in backward()).
  std::vector<Tensor> sent_grad_;  // per chunk
  std::pair<int, int> sent_key_{-1, -1};
  size_t max_live_ = 0;
  std::vector<size_t> slot_bytes_;
  double data_seconds_ = 0;
  int64_t data_sleep_ms_ = 0;  // testing aid, see pipeline_stage.cpp
  int last_microbatch_ = -1;
  std::vector<model::GptModel::ParamHook> grads_ready_, before_use_;  // per chunk
};

}  // namespace tripod::train
