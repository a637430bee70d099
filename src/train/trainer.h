// The training loop (Megatron's pretrain()/train_step()):
//   for each iteration: the pipeline schedule runs every micro-batch through
//   this rank's model chunks (forward, backward, grads accumulate in fp32)
//   -> tied-embedding and sequence-parallel grad reductions -> data-parallel
//   reduction per bucket (all-reduce, or reduce-scatter with the distributed
//   optimizer; with --overlap-grad-reduce launched during the last
//   micro-batch's backward, see train/grad_buckets.h) -> global grad norm over every parameter once -> clip -> AdamW at the
//   scheduled lr (on this rank's shard with the distributed optimizer, then
//   all-gather) -> log -> eval -> save.
// The loss of an iteration is the mean over every token of the global batch.
// With TP = PP = DP = 1 every step is a no-op or a plain loop.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/ops.h"
#include "data/dataset.h"
#include "comm/context.h"
#include "model/gpt_model.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "parallel/groups.h"
#include "train/grad_buckets.h"
#include "train/loss_scaler.h"
#include "train/metrics.h"
#include "train/tensorboard.h"
#include "train/pipeline_stage.h"
#include "train/train_args.h"

namespace tripod::train {

struct StepResult {
  double lm_loss = 0;    // mean token loss of the global batch (valid on the last pp stage)
  double grad_norm = 0;  // before clipping (of the unscaled gradients under fp16)
  double loss_scale = 1;  // the scale this iteration ran with (1 unless --fp16)
  bool skipped = false;   // fp16 overflow: no optimizer step
  double lr = 0;
  parallel::ScheduleStats schedule;  // pp wait of the time split: schedule.wait_seconds
  // Host seconds of this iteration by kind, for the time split (train/metrics.h).
  double data_seconds = 0, tp_comm_seconds = 0, dp_comm_seconds = 0, optimizer_seconds = 0;
};

// One model chunk (virtual pipeline stage) of this rank with its optimizer.
struct Chunk {
  std::unique_ptr<model::GptModel> model;
  // Data-parallel buckets of the flat grad buffer and, with the distributed
  // optimizer, this rank's shard layout (per-bucket pieces, concatenated).
  std::unique_ptr<GradBuckets> buckets;
  std::unique_ptr<optim::AdamW> optimizer;  // over the shard (the whole buffer unless distributed)
  std::vector<optim::Segment> segments;     // relative to the shard
  std::vector<optim::Segment> norm_segments;  // the ranges the grad norm counts, relative to the shard
  Tensor value_shard;                       // distributed optimizer: (shard) fp32 master weights being stepped
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

  // This rank's model chunks (one unless interleaved); model() is the first.
  std::vector<Chunk>& chunks() { return chunks_; }
  model::GptModel& model() { return *chunks_.front().model; }
  int64_t iteration() const { return iteration_; }
  int64_t consumed_samples() const { return consumed_samples_; }
  int64_t num_microbatches() const { return num_microbatches_; }
  void set_progress(int64_t iteration, int64_t consumed_samples) {
    iteration_ = iteration;
    consumed_samples_ = consumed_samples;
  }
  // --overlap-param-gather: waits for every outstanding parameter
  // all-gather. Call before reading parameter values outside a forward
  // (checkpoints, dumps); forwards wait per bucket themselves.
  void finish_param_gather();
  // Writes this rank's parameter shards (names, shard rule, tp coordinates,
  // f32 values) to DIR/rank<global>.bin, for parity tests and debugging.
  void dump_weights(const std::string& dir);

  // ---- checkpoints (train/checkpointing.cpp) ----
  // Collective over the world. Writes --save/iter_<N>/ atomically.
  void save_checkpoint();
  // Collective. Restores from --load (latest iteration), at any layout.
  void load_checkpoint();
  // Optimizer moments of a chunk as flat f32 tensors on the backend device,
  // aligned with chunks()[c].model->params().values() (gathered over dp when
  // the optimizer is distributed); set_optimizer_state is the inverse.
  std::pair<Tensor, Tensor> optimizer_state(int chunk = 0);
  void set_optimizer_state(const Tensor& exp_avg, const Tensor& exp_avg_sq, int64_t steps, int chunk = 0);
  const TrainArgs& args() const { return args_; }
  const parallel::ProcessGroups& groups() const { return groups_; }
  int tp_rank() const { return tp_rank_; }
  int dp_rank() const { return dp_rank_; }
  int pp_rank() const { return pp_rank_; }

 private:
  void setup(data::DatasetSplits* data);
  void build_chunks();
  void fill_batch(const data::TokenDataset& ds, int64_t first, Tensor& tokens, Tensor& targets);
  void reduce_gradients();
  bool overlap_grads() const { return args_.overlap_grad_reduce && dp_size_ > 1; }
  bool overlap_params() const { return args_.overlap_param_gather && dp_size_ > 1; }
  int64_t bucket_size() const;  // 0: one bucket per chunk
  void install_overlap_hooks();
  void on_grads_ready(int chunk, const std::vector<size_t>& params);
  double global_grad_norm();
  bool counts_in_grad_norm(const model::Param& p, const model::StageConfig& stage) const;
  void optimizer_step(double lr, float clip);
  double reduce_loss(double local_sum);
  void check_finite(double loss, double grad_norm);
  void inject_grad_overflow();
  void sync_compute_weights();
  bool is_logger() const;
  bool exit_requested();
  void log_startup();
  void log_memory(const StepResult& first_step);
  parallel::ScheduleConfig schedule_config(bool forward_only) const;

  TrainArgs args_;
  backend::Backend& be_;
  std::unique_ptr<comm::DistContext> own_ctx_;  // when no groups were given
  parallel::ProcessGroups groups_;
  parallel::CommTimers comm_timers_;     // host time in tp / dp communication (time split)
  std::vector<Chunk> chunks_;
  std::unique_ptr<GptPipelineStage> stage_;
  optim::LrSchedule schedule_;
  data::DatasetSplits data_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // --tensorboard-dir
  std::unique_ptr<LossScaler> scaler_;   // --fp16 only
  int64_t skipped_updates_ = 0;          // fp16 overflow steps since start (lr schedule)
  int64_t num_microbatches_ = 1;
  int64_t iteration_ = 0, consumed_samples_ = 0;
  int tp_rank_ = 0, dp_rank_ = 0, pp_rank_ = 0, dp_size_ = 1, vpp_ = 1;
  int64_t batch_base_ = 0;               // first sample of the current global batch
  const data::TokenDataset* batch_ds_ = nullptr;
};

// --exit-signal-handler: SIGTERM/SIGINT set a flag the loop checks at each
// iteration boundary (see NOTE [Exit signal] in trainer.cpp).
void install_exit_signal_handler();

// Checks the layout- and batch-related flag combinations with errors that
// name the flags (global batch % (micro x dp), ...). Called by Trainer.
void validate_args(const TrainArgs& args, int world_size);
// Virtual pipeline stages per pp rank from the flags (1 = no interleaving).
int virtual_pipeline_size(const TrainArgs& args);

}  // namespace tripod::train
