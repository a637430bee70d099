// Everything `tripod train` takes, with Megatron's flag names in comments.
// cli/train.cpp fills it; Trainer validates the combinations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/gpt_config.h"

namespace tripod::train {

struct TrainArgs {
  config::GptConfig model;
  // batch
  int64_t micro_batch_size = 1;      // --micro-batch-size
  int64_t global_batch_size = 0;     // --global-batch-size (0: micro x dp)
  int64_t train_iters = 0;           // --train-iters
  // optimizer
  double lr = 1e-4, min_lr = 0.0;    // --lr, --min-lr
  std::string lr_decay_style = "linear";  // --lr-decay-style (Megatron's default)
  int64_t lr_decay_iters = 0;        // --lr-decay-iters (0: train-iters)
  int64_t lr_warmup_iters = 0;       // --lr-warmup-iters
  double weight_decay = 0.01;        // --weight-decay
  double clip_grad = 1.0;            // --clip-grad
  double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_eps = 1e-8;
  uint64_t seed = 1234;              // --seed
  // data
  bool mock_data = false;            // --mock-data
  std::vector<std::string> data_path;  // --data-path
  std::string split = "969,30,1";    // --split
  // eval / logging
  int64_t eval_interval = 1000, eval_iters = 100;  // --eval-interval, --eval-iters
  int64_t log_interval = 100;        // --log-interval
  std::string metrics_file;          // --metrics-file (JSONL)
  std::string tensorboard_dir;       // --tensorboard-dir (TensorBoard event files)
  // layout
  int tp = 1, pp = 1;                // --tensor-model-parallel-size, --pipeline-model-parallel-size
  int64_t num_layers_per_virtual_stage = 0;  // --num-layers-per-virtual-pipeline-stage
  int virtual_pipeline_size = 0;             // --virtual-pipeline-model-parallel-size (0: from the above)
  bool sequence_parallel = false;    // --sequence-parallel
  bool use_distributed_optimizer = false;
  // data parallelism (distributed/distributed_data_parallel.h)
  int64_t ddp_bucket_size = 0;       // --ddp-bucket-size, elements (0: Megatron's default, max(4e7, 1e6 x dp))
  bool overlap_grad_reduce = false;  // --overlap-grad-reduce
  bool overlap_param_gather = false; // --overlap-param-gather (with --use-distributed-optimizer and --overlap-grad-reduce)
  double distributed_timeout_minutes = 10;  // --distributed-timeout-minutes
  // device / precision
  std::string device = "cpu";        // --device cpu|cuda
  bool deterministic_mode = false;   // --deterministic-mode: no atomics-ordered kernels where a choice exists
  bool bf16 = false, fp16 = false;   // --bf16, --fp16
  // fp16 loss scaling (see train/loss_scaler.h)
  double loss_scale = 0;                       // --loss-scale (0: dynamic)
  double initial_loss_scale = 4294967296.0;    // --initial-loss-scale
  double min_loss_scale = 1.0;                 // --min-loss-scale
  int64_t loss_scale_window = 1000;            // --loss-scale-window
  int hysteresis = 2;                          // --hysteresis
  // activation recomputation (model/gpt_model.h, Recompute)
  bool recompute_activations = false;          // --recompute-activations (= selective)
  std::string recompute_granularity;           // --recompute-granularity full|selective
  int64_t inject_grad_overflow_at = 0;         // testing aid: poison the grads of this iteration (1-based)
  double peak_tflops = 0;            // --peak-tflops for MFU (0: from the device)
  // outputs
  std::string save, load;            // --save, --load
  int64_t save_interval = 0;         // --save-interval (0: only at the end when --save is given)
  int save_retain = 0;               // --save-retain K: keep the last K checkpoints (0: all)
  bool finetune = false;             // --finetune: load weights only, reset iteration and optimizer
  bool no_load_optim = false;        // --no-load-optim
  bool no_load_rng = false;          // --no-load-rng
  int64_t ckpt_step = -1;            // --ckpt-step N: load iteration N from --load (-1: the latest)
  int64_t exit_interval = 0;         // --exit-interval N: save (with --save) and stop at a multiple of N
  bool exit_signal_handler = false;  // --exit-signal-handler: SIGTERM -> save at the next iteration, exit 0
  std::string tokenizer_type, vocab_file, merge_file, tokenizer_model;  // recorded in checkpoints
};

}  // namespace tripod::train
