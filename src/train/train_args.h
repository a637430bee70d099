// Everything `tripod train` takes, in sections that each component takes
// whole: the model (config::GptConfig), the layout and data parallelism
// (ParallelArgs, holding distributed::DistributedDataParallelConfig), the
// batch, the optimizer (optim::AdamWConfig, optim::LrSchedule), precision
// (LossScalerConfig), data (data::DataConfig, data::TokenizerConfig),
// checkpoints and logging. The flags that fill each member, with their help
// and Megatron-LM status, are one table (train/flag_table.h); cli/ registers
// them, Trainer validates the combinations.
//
// Derived values are computed in one place: finalize() after parsing (the
// Llama-family spellings, --lr-warmup-fraction), resolve() once the job's
// layout is known (defaults that depend on dp or tp, the lr schedule, the
// compute dtype, the recompute kind, the samples per split).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/gpt_config.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "distributed/distributed_data_parallel.h"
#include "config/options.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "parallel/layout.h"
#include "tensor/dtype.h"
#include "train/loss_scaler.h"

namespace tripod::train {

// Megatron's model flags that are spelled differently from the GptConfig
// member they set (names, aliases); finalize() applies them to the model.
struct ModelFlagSpelling {
  std::string position_embedding_type;  // --position-embedding-type ("": not given)
  std::string normalization;            // --normalization ("": not given)
  bool use_rotary_position_embeddings = false;  // = --position-embedding-type rope
  bool no_position_embedding = false;           // no learned position table
  bool disable_bias_linear = false;             // add_bias_linear = false
};

// The layout flags as given. After the job is assembled the sizes are read
// from the process groups' Layout (parallel/groups.h), not from here.
struct ParallelArgs {
  int tp = 1, pp = 1;                        // --tensor-model-parallel-size, --pipeline-model-parallel-size
  int64_t num_layers_per_virtual_stage = 0;  // --num-layers-per-virtual-pipeline-stage
  int virtual_pipeline_size = 0;             // --virtual-pipeline-model-parallel-size (0: from the above)
  bool sequence_parallel = false;            // --sequence-parallel
  int cp = 1;                                // --context-parallel-size
  std::vector<std::string> cp_comm_type = {"p2p"};  // --cp-comm-type (p2p, all_gather, a2a; one, or one per layer)
  int ep = 1;                                // --expert-model-parallel-size (experts over dp ranks)
  int etp = 0;                               // --expert-tensor-parallel-size (0: not given = the tp size, expert_tensor_parallel_size())
  distributed::DistributedDataParallelConfig ddp;  // --use-distributed-optimizer, --overlap-*, --ddp-bucket-size
  std::string data_parallel_sharding_strategy;  // --data-parallel-sharding-strategy ("": not given); ddp.sharding by finalize()
  bool use_megatron_fsdp = false;            // --use-megatron-fsdp (default strategy optim_grads_params)
  // The gradient reduction's dtype (ddp.grad_comm_dtype by finalize(); NOTE
  // [bf16 gradient communication]) and Megatron-FSDP's dtype options ("": not given).
  bool grad_reduce_in_bf16 = false;          // --grad-reduce-in-bf16
  std::string fsdp_grad_comm_dtype;          // --megatron-fsdp-grad-comm-dtype fp32|bf16|auto
  std::string fsdp_main_grads_dtype;         // --megatron-fsdp-main-grads-dtype fp32|bf16|auto
  std::string fsdp_main_params_dtype;        // --megatron-fsdp-main-params-dtype fp32|auto
  std::string outer_dp_sharding_strategy;    // --outer-dp-sharding-strategy no_shard
  std::string distributed_backend;           // --distributed-backend nccl | gloo ("": by device)
  double distributed_timeout_minutes = 10;   // --distributed-timeout-minutes
  // Activation recomputation (config/options.h, Recompute).
  bool recompute_activations = false;        // --recompute-activations (= selective)
  std::string recompute_granularity;         // --recompute-granularity full|selective
  config::Recompute recompute = config::Recompute::None;  // resolved from the two above
};

struct BatchArgs {
  int64_t micro_batch_size = 1;   // --micro-batch-size
  int64_t global_batch_size = 0;  // --global-batch-size (0: micro x dp, set by resolve())
  int64_t train_iters = 0;        // --train-iters (or train_samples / global batch, by resolve())
  int64_t train_samples = 0;      // --train-samples (Megatron's sample-based run; 0: iterations)
};

struct OptimizerArgs {
  optim::AdamWConfig adam;               // --adam-beta1/2, --adam-eps, --weight-decay
  double clip_grad = 1.0;                // --clip-grad
  optim::LrSchedule lr;                  // --lr, --min-lr, --lr-warmup-iters, --lr-decay-iters (0: train-iters)
  std::string lr_decay_style = "linear";  // --lr-decay-style (Megatron's default); lr.style by resolve()
  double lr_warmup_fraction = -1;        // --lr-warmup-fraction: lr.warmup_iters by finalize()
  // With --train-samples the schedule counts samples, as Megatron's
  // (lr.steps_per_iteration = the global batch, set by resolve()).
  int64_t lr_warmup_samples = 0, lr_decay_samples = 0;  // --lr-warmup-samples, --lr-decay-samples (0: train samples)
  // Megatron's --decoupled-lr / --decoupled-min-lr: the word embeddings and
  // output layer follow the same schedule between these (-1: not given; the
  // min defaults to --min-lr).
  double decoupled_lr = -1, decoupled_min_lr = -1;
};

struct PrecisionArgs {
  bool bf16 = false, fp16 = false;  // --bf16, --fp16
  LossScalerConfig loss_scaler;     // --loss-scale, --initial-loss-scale, ... (fp16 only)
  DType compute_dtype = DType::F32; // resolved from --bf16 / --fp16
  // FP8 (config/fp8_config.h): the spelled flags, applied to model.fp8 by
  // finalize(); --fp8-margin, --fp8-amax-history-len and the bf16 layer
  // counts set model.fp8 directly.
  std::string fp8_format;                          // --fp8-format e4m3|hybrid ("": no FP8)
  std::string fp8_recipe = "delayed";              // --fp8-recipe (Megatron's default)
  std::string fp8_amax_compute_algo = "most_recent";  // --fp8-amax-compute-algo
};

struct CheckpointArgs {
  std::string save, load;            // --save, --load
  int64_t save_interval = 0;         // --save-interval (0: only at the end when --save is given)
  int save_retain = 0;               // --save-retain K: keep the last K checkpoints (0: all)
  bool save_into_existing = false;   // --save-into-existing: --save may hold another run's checkpoints
  bool finetune = false;             // --finetune: load weights only, reset iteration and optimizer
  bool no_load_optim = false;        // --no-load-optim
  bool no_load_rng = false;          // --no-load-rng
  int64_t ckpt_step = -1;            // --ckpt-step N: load iteration N from --load (-1: the latest)
  int64_t exit_interval = 0;         // --exit-interval N: save (with --save) and stop at a multiple of N
  bool exit_signal_handler = false;  // --exit-signal-handler: SIGTERM -> save at the next iteration, exit 0
  double exit_duration_in_mins = 0;  // --exit-duration-in-mins: the signal-handler path after M minutes
};

struct LoggingArgs {
  int64_t eval_interval = 1000, eval_iters = 100;  // --eval-interval, --eval-iters
  int64_t log_interval = 100;        // --log-interval
  std::string metrics_file;          // --metrics-file (JSONL)
  std::string tensorboard_dir;       // --tensorboard-dir (TensorBoard event files)
  double peak_tflops = 0;            // --peak-tflops for MFU (0: from the device)
  // Megatron's --profile: the CUDA profiler API's capture range around the
  // 0-based iterations [profile_step_start, profile_step_end) on these ranks.
  bool profile = false;                                 // --profile
  int64_t profile_step_start = 10, profile_step_end = 12;  // --profile-step-start / -end (Megatron's defaults)
  std::vector<std::string> profile_ranks = {"0"};       // --profile-ranks
};

struct TrainArgs {
  config::GptConfig model;
  ModelFlagSpelling model_flags;
  ParallelArgs parallel;
  BatchArgs batch;
  OptimizerArgs optimizer;
  PrecisionArgs precision;
  // --mock-data, --data-path, --split; the sizes and sample counts by resolve().
  data::DataConfig data;
  data::TokenizerConfig tokenizer;  // --tokenizer-type, --vocab-file, ... (recorded in checkpoints)
  CheckpointArgs checkpoint;
  LoggingArgs logging;
  std::string device;                // --device cpu|cuda ("": the job chooses; cpu for a Trainer alone)
  bool deterministic_mode = false;   // --deterministic-mode: no atomics-ordered kernels where a choice exists
  uint64_t seed = 1234;              // --seed
  int64_t inject_grad_overflow_at = 0;  // testing aid: poison the grads of this iteration (1-based)
  std::string dump_weights;          // testing aid: write each rank's shards to DIR after training

  // After parsing: applies model_flags to the model and --lr-warmup-fraction
  // to the warmup. Idempotent. Errors name the flags.
  void finalize();
  // Once the layout is known (Trainer::setup): the model's derived sizes
  // (config::GptConfig::finalize), the global batch default
  // (micro x dp), the lr schedule's decay iterations and style, the compute
  // dtype, the recompute kind, the fp16 scaler's floor and data's sizes and
  // samples per split. Idempotent.
  void resolve(const parallel::Layout& layout);

 private:
  void resolve_sample_based_run();
  bool sample_based_run_resolved_ = false;  // resolve() is idempotent: train_iters is derived once
};

// --profile-ranks as numbers, each checked against the world size (0: not
// known yet); errors name the flag.
std::vector<int> profile_ranks(const LoggingArgs& l, int world_size);

// Applies the spelled model flags to `m` (also `tripod plan`'s model).
void apply_model_flags(const ModelFlagSpelling& f, config::GptConfig& m);
// Applies the spelled FP8 flags to m.fp8 (errors name the flag and the fix).
void apply_fp8_flags(const PrecisionArgs& p, config::GptConfig& m);

}  // namespace tripod::train
