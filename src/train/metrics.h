// Training metrics: the Megatron-style log line and the JSONL metrics file
// (--metrics-file). Keys of the JSONL records are a stable interface:
//   iteration, consumed_samples, lm_loss, lr, grad_norm, loss_scale,
//   skipped_iters, elapsed_ms, tokens_per_sec, tflops_per_gpu, mfu,
//   mem_peak_bytes                                   (training records)
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
