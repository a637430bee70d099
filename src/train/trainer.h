// The training loop (Megatron's pretrain()/train_step()):
//   for each iteration: the pipeline schedule runs every micro-batch through
//   this rank's model chunks (forward, backward, grads accumulate in fp32)
//   -> the optimizer's reduce_grads (finalize_model_grads: tied-embedding
//   and sequence-parallel grad reductions, then the data-parallel reduction
//   per bucket; with --overlap-grad-reduce launched during the last
//   micro-batch's backward) -> global grad norm over every parameter once
//   -> clip -> AdamW at the scheduled lr -> log -> eval -> save.
// Data parallelism (buffers, buckets, the reductions, the sharded or
// replicated optimizer) lives in distributed/; the trainer owns the loop,
// the batches, loss scaling, evaluation, logging and checkpoints.
// The loss of an iteration is the mean over every token of the global batch.
// With TP = PP = DP = 1 every step is a no-op or a plain loop.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "base/error.h"
#include "backend/ops.h"
#include "data/dataset.h"
#include "comm/context.h"
#include "distributed/distributed_data_parallel.h"
#include "distributed/distributed_optimizer.h"
#include "distributed/fp8_param_gather.h"
#include "model/gpt_model.h"
#include "optim/lr_schedule.h"
#include "parallel/groups.h"
#include "train/batch_source.h"
#include "train/loss_scaler.h"
#include "train/metrics.h"
#include "train/moe_step.h"
#include "train/pipeline_stage.h"
#include "train/tensorboard.h"
#include "train/time_split.h"
#include "train/train_args.h"

namespace tripod::ckpt {
class CheckpointReader;
}

namespace tripod::train {

struct StepResult {
  double lm_loss = 0;    // mean token loss of the global batch (valid on the last pp stage)
  double grad_norm = 0;  // before clipping (of the unscaled gradients under fp16)
  double loss_scale = 1;  // the scale this iteration ran with (1 unless --fp16)
  bool skipped = false;   // fp16 overflow: no optimizer step
  double lr = 0;
  parallel::ScheduleStats schedule;  // the schedule's steps, live micro-batches and p2p wait
  std::optional<MoeStepMetrics> moe;  // a model with experts: its losses and loads (train/moe_step.h)
};

class Trainer {
 public:
  // groups: this rank's process groups (null: a single process).
  Trainer(const TrainArgs& args, backend::Backend& be, const parallel::ProcessGroups* groups = nullptr);
  // With datasets given by the caller (tests, tools) instead of --data-path/--mock-data.
  Trainer(const TrainArgs& args, backend::Backend& be, data::DatasetSplits data,
          const parallel::ProcessGroups* groups = nullptr);
  ~Trainer();

  // Runs --train-iters iterations with logging, evaluation and saving.
  void run();
  // One iteration (exposed for tests).
  StepResult train_step();
  // Mean loss over --eval-iters global batches of the validation split.
  double evaluate();

  // This rank's model chunks (virtual pipeline stages; one unless
  // interleaved); model() is the first.
  std::vector<std::unique_ptr<model::GptModel>>& models() { return models_; }
  model::GptModel& model() { return *models_.front(); }
  distributed::DistributedDataParallel& ddp() { return *ddp_; }
  distributed::DistributedOptimizer& optimizer() { return *optimizer_; }
  int64_t iteration() const { return iteration_; }
  // The signal that stopped run() before --train-iters (NOTE [Exit signal]), or 0.
  int stop_signal() const { return stop_signal_; }
  int64_t consumed_samples() const { return consumed_samples_; }
  int64_t num_microbatches() const { return num_microbatches_; }
  void set_progress(int64_t iteration, int64_t consumed_samples) {
    iteration_ = iteration;
    consumed_samples_ = consumed_samples;
  }
  // Writes this rank's parameter shards (names, shard rule, tp coordinates,
  // f32 values) to DIR/rank<global>.bin, for parity tests and debugging.
  void dump_weights(const std::string& dir);

  // ---- checkpoints (train/checkpointing.cpp) ----
  // Collective over the world. Writes --save/iter_<N>/ atomically.
  void save_checkpoint();
  void save_checkpoint_steps(const std::string& tmp);  // prepare, write, commit
  void load_fp8_state(const ckpt::CheckpointReader& reader);  // FP8 delayed scaling, when saved
  // Collective. Restores from --load (latest iteration), at any layout.
  // (Optimizer moments: DistributedOptimizer::state / set_state.)
  void load_checkpoint();
  const TrainArgs& args() const { return args_; }
  const parallel::ProcessGroups& groups() const { return groups_; }
  int tp_rank() const { return tp_rank_; }
  int dp_rank() const { return dp_rank_; }
  int pp_rank() const { return pp_rank_; }

 private:
  void setup(data::DatasetSplits* data);
  void build_chunks();
  // The micro-batches of the global batch starting at first_sample, for this dp rank.
  BatchSource batches(const data::TokenDataset& dataset, int64_t first_sample) const;
  double reduce_loss(double local_sum);
  void check_finite(double loss, double grad_norm);
  void inject_grad_overflow();
  bool is_logger() const;
  int exit_requested();  // the signal every rank agrees to stop on, or 0
  void log_startup();
  void log_memory(const StepResult& first_step);
  void training_log(const StepResult& last, double loss_sum, int64_t skipped);
  parallel::ScheduleConfig schedule_config(bool forward_only) const;

  TrainArgs args_;
  backend::Backend& be_;
  std::unique_ptr<comm::DistContext> own_ctx_;  // when no groups were given
  parallel::ProcessGroups groups_;
  TimeSplitAccumulator time_split_;      // where the iterations' host time goes (train/time_split.h)
  // Destroyed in reverse: the optimizer and the buffers (whose outstanding
  // collectives write into the models' buffers) before the models.
  std::vector<std::unique_ptr<model::GptModel>> models_;
  std::unique_ptr<distributed::DistributedDataParallel> ddp_;
  std::unique_ptr<distributed::DistributedOptimizer> optimizer_;
  // --fp8-param-gather: per model chunk with FP8 layers (distributed/fp8_param_gather.h).
  std::vector<std::unique_ptr<distributed::Fp8ParamGather>> fp8_gathers_;
  std::unique_ptr<GptPipelineStage> stage_;
  optim::LrSchedule schedule_;
  std::optional<optim::LrSchedule> decoupled_schedule_;  // --decoupled-lr: the embedding and output layer
  data::DatasetSplits data_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // --tensorboard-dir
  std::unique_ptr<LossScaler> scaler_;   // --fp16 only
  int64_t skipped_updates_ = 0;          // fp16 overflow steps since start (lr schedule)
  int64_t num_microbatches_ = 1;
  int64_t iteration_ = 0, consumed_samples_ = 0;
  int tp_rank_ = 0, dp_rank_ = 0, pp_rank_ = 0;
  int cp_rank_ = 0;  // --context-parallel-size: this rank's share of every sequence
  int stop_signal_ = 0;
  bool profiling_ = false;     // --profile on this rank (--profile-ranks)
  bool profile_open_ = false;  // the backend's capture range is open
  void profile_range(bool open);
  std::string profile_window() const;  // "iterations 11-12"
  // --save-retain removes only this run's checkpoints (NOTE [Whose checkpoints]
  // in ckpt/sharded_checkpoint.h): those it saved, and, when it resumed from
  // its --save folder, those up to the iteration it loaded.
  std::vector<int64_t> saved_iterations_;
  int64_t resumed_upto_ = -1;
};

// Checks the batch-, precision- and layout-related flag combinations on the
// job's layout, with errors that name the flags (global batch % (micro x
// dp), ...). Called by Trainer.
void validate_args(const TrainArgs& args, const parallel::Layout& layout);
// The same checks recording into `problems` (no virtual-pipeline check);
// layout null: only those that need no layout.
void check_args(const TrainArgs& args, const parallel::Layout* layout, ErrorList& problems);
// Before the job starts (tripod train): every problem of the finalized flags
// against each other and against world_size ranks (the layout's sizes, the
// virtual pipeline, check_args), recorded into `problems`, so a command line
// gets all of its incompatibilities in one error.
void check_command_line(const TrainArgs& args, int world_size, ErrorList& problems);
// Virtual pipeline stages per pp rank from the flags (1 = no interleaving).
int virtual_pipeline_size(const TrainArgs& args);
// --expert-tensor-parallel-size in effect: the flag, else Megatron's
// default, the --tensor-model-parallel-size (1 for a model without experts).
int expert_tensor_parallel_size(const TrainArgs& args);

}  // namespace tripod::train
