// The training loop (Megatron's pretrain()/train_step()):
//   for each iteration: micro-batches (forward, backward, grads accumulate)
//   -> global grad norm -> clip -> AdamW at the scheduled lr -> log -> eval.
// The loss of an iteration is the mean over every token of the global batch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/ops.h"
#include "data/dataset.h"
#include "model/gpt_model.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "parallel/groups.h"
#include "train/metrics.h"
#include "train/train_args.h"

namespace tripod::train {

struct StepResult {
  double lm_loss = 0;    // mean token loss of the global batch
  double grad_norm = 0;  // before clipping
  double lr = 0;
};

class Trainer {
 public:
  // groups: this rank's process groups (null: a single process).
  Trainer(const TrainArgs& args, backend::Backend& be, const parallel::ProcessGroups* groups = nullptr);
  // With datasets given by the caller (tests, tools) instead of --data-path/--mock-data.
  Trainer(const TrainArgs& args, backend::Backend& be, data::DatasetSplits data,
          const parallel::ProcessGroups* groups = nullptr);
  ~Trainer();

  // Runs --train-iters iterations with logging and evaluation.
  void run();
  // One iteration (exposed for tests): returns loss, grad norm, lr.
  StepResult train_step();
  // Mean loss over --eval-iters global batches of the validation split.
  double evaluate();

  model::GptModel& model() { return *model_; }
  int64_t iteration() const { return iteration_; }
  int64_t consumed_samples() const { return consumed_samples_; }
  int64_t num_microbatches() const { return num_microbatches_; }
  // Writes this rank's parameter shards (names, shard rule, tp coordinates,
  // f32 values) to DIR/rank<global>.bin, for parity tests and debugging.
  void dump_weights(const std::string& dir);

  // ---- checkpoints (train/checkpointing.cpp) ----
  // Collective over the world. Writes --save/iter_<N>/ atomically.
  void save_checkpoint();
  // Collective. Restores from --load (latest iteration), at any layout.
  void load_checkpoint();
  // Optimizer moments as flat f32 tensors on the backend device, aligned
  // with model().params().values() (gathered over dp when the optimizer is
  // distributed); set_optimizer_state is the inverse.
  std::pair<Tensor, Tensor> optimizer_state();
  void set_optimizer_state(const Tensor& exp_avg, const Tensor& exp_avg_sq, int64_t steps);
  const TrainArgs& args() const { return args_; }
  const parallel::ProcessGroups& groups() const { return groups_; }
  int tp_rank() const { return tp_rank_; }
  int dp_rank() const { return dp_rank_; }

 private:
  void setup(data::DatasetSplits* data);
  void load_batch(const data::TokenDataset& ds, int64_t first_sample, model::MicroBatchActs& acts);
  double global_grad_norm();
  void reduce_gradients();
  double reduce_loss(double local_sum);
  bool is_logger() const;
  bool exit_requested();
  void check_finite(double loss, double grad_norm);

  TrainArgs args_;
  backend::Backend& be_;
  std::unique_ptr<model::GptModel> model_;
  std::unique_ptr<optim::AdamW> optimizer_;
  std::vector<optim::Segment> segments_;
  optim::LrSchedule schedule_;
  data::DatasetSplits data_;
  std::unique_ptr<MetricsWriter> metrics_;
  model::MicroBatchActs acts_;
  parallel::ProcessGroups groups_;  // size-1 groups (null communicators) for a single process
  int tp_rank_ = 0, dp_rank_ = 0, dp_size_ = 1;
  int64_t num_microbatches_ = 1;
  int64_t iteration_ = 0, consumed_samples_ = 0;
};

// --exit-signal-handler: SIGTERM/SIGINT set a flag the loop checks at each
// iteration boundary (see NOTE [Exit signal] in trainer.cpp).
void install_exit_signal_handler();

// Checks the layout- and batch-related flag combinations with errors that
// name the flags (global batch % (micro x dp), ...). Called by Trainer.
void validate_args(const TrainArgs& args, int world_size);

}  // namespace tripod::train
