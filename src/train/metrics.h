// Training metrics: the Megatron-style log line and the JSONL metrics file
// (--metrics-file). Keys of the JSONL records are a stable interface:
//   iteration, consumed_samples, lm_loss, lr, grad_norm, loss_scale,
//   skipped_iters, elapsed_ms, tokens_per_sec, tflops_per_gpu, mfu,
//   mem_peak_bytes,
//   time_compute_ms, time_tp_comm_ms, time_pp_wait_ms, time_dp_comm_ms,
//   time_optimizer_ms, time_data_ms                  (training records)
//   iteration, val_loss, val_ppl                     (evaluation records)
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace tripod::train {

struct IterationMetrics {
  int64_t iteration = 0, train_iters = 0, consumed_samples = 0, global_batch_size = 0;
  double lm_loss = 0, lr = 0, grad_norm = 0, loss_scale = 1;
  int64_t skipped_iters = 0, nan_iters = 0;
  double elapsed_ms = 0, tokens_per_sec = 0, tflops_per_gpu = 0;
  std::optional<double> mfu;  // fraction of peak; empty when no peak is known
  uint64_t mem_peak_bytes = 0;
  // Pipeline parallelism: measured bubble (p2p wait / compute) and theory.
  std::optional<double> pp_bubble, pp_bubble_theory;
  // Where an iteration's host wall time went: ms per iteration, mean over
  // the log interval; the parts add up to elapsed_ms. Measured by
  // TimeSplitAccumulator (train/time_split.h).
  struct TimeSplit {
    double compute_ms = 0;    // the rest: forward, backward, loss, bookkeeping
    double tp_comm_ms = 0;    // blocked in tp collectives (incl. sequence-parallel and tied-embedding grads)
    double pp_wait_ms = 0;    // blocked in pipeline p2p (bubble + transfer)
    double dp_comm_ms = 0;    // blocked in dp grad reduction / param all-gather (exposed part only)
    double optimizer_ms = 0;  // grad norm + clip + AdamW + compute-copy cast, less its dp comm
    double data_ms = 0;       // loading micro-batches (dataset read + host-to-device copy)
  } time;
  // A model with experts (train/moe_step.h): the last iteration's MoE losses and loads.
  struct Moe {
    double load_balancing_loss = 0, z_loss = 0;
    int64_t min_tokens_per_expert = 0, max_tokens_per_expert = 0;
  };
  std::optional<Moe> moe;
};

std::string format_log_line(const IterationMetrics& m);

// Appends one JSON object per line; flushes each line so a crash loses none.
class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);  // empty path: disabled
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write_train(const IterationMetrics& m);
  void write_eval(int64_t iteration, double val_loss);

 private:
  FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace tripod::train
