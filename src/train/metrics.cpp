// Implementation of train/metrics.h.
#include "train/metrics.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace tripod::train {

std::string format_log_line(const IterationMetrics& m) {
  const std::time_t now = std::time(nullptr);
  std::string mfu = m.mfu ? fmt::format("{:.1f}%", *m.mfu * 100.0) : std::string("n/a");
  return fmt::format(
      " [{:%Y-%m-%d %H:%M:%S}] iteration {:>8}/{:>8} | consumed samples: {:>12} | elapsed time per "
      "iteration (ms): {:.1f} | learning rate: {:.6E} | global batch size: {:>5} | lm loss: {:.6E} | "
      "loss scale: {:.1f} | grad norm: {:.3f} | number of skipped iterations: {:>3} | number of nan "
      "iterations: {:>3} | tokens/s: {:.0f} | TFLOP/s/GPU: {:.2f} | MFU: {} | mem peak: {:.1f} MiB",
      fmt::localtime(now), m.iteration, m.train_iters, m.consumed_samples, m.elapsed_ms, m.lr,
      m.global_batch_size, m.lm_loss, m.loss_scale, m.grad_norm, m.skipped_iters, m.nan_iters,
      m.tokens_per_sec, m.tflops_per_gpu, mfu, static_cast<double>(m.mem_peak_bytes) / (1 << 20)) +
         (m.pp_bubble ? fmt::format(" | pp bubble: {:.3f} (theory {:.3f})", *m.pp_bubble, m.pp_bubble_theory.value_or(0))
                      : std::string()) +
         fmt::format(" | time split (ms): compute {:.2f} | tp comm {:.2f} | pp wait {:.2f} | dp comm {:.2f} | "
                     "optimizer {:.2f} | data {:.2f}",
                     m.time.compute_ms, m.time.tp_comm_ms, m.time.pp_wait_ms, m.time.dp_comm_ms,
                     m.time.optimizer_ms, m.time.data_ms) +
         (m.moe ? fmt::format(" | load balancing loss: {:.6E} | z loss: {:.6E} | tokens per expert min/max: {}/{}",
                              m.moe->load_balancing_loss, m.moe->z_loss, m.moe->min_tokens_per_expert,
                              m.moe->max_tokens_per_expert)
                : std::string());
}

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), "a");
  TRIPOD_CHECK_HINT(file_, "check that the directory exists and is writable",
                    "cannot open --metrics-file '{}': {}", path, std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

static void write_line(FILE* f, const nlohmann::json& j) {
  const std::string s = j.dump() + "\n";
  std::fwrite(s.data(), 1, s.size(), f);
  std::fflush(f);
}

void MetricsWriter::write_train(const IterationMetrics& m) {
  if (!file_) return;
  nlohmann::json j = {{"iteration", m.iteration},
                      {"consumed_samples", m.consumed_samples},
                      {"lm_loss", m.lm_loss},
                      {"lr", m.lr},
                      {"grad_norm", m.grad_norm},
                      {"loss_scale", m.loss_scale},
                      {"skipped_iters", m.skipped_iters},
                      {"elapsed_ms", m.elapsed_ms},
                      {"tokens_per_sec", m.tokens_per_sec},
                      {"tflops_per_gpu", m.tflops_per_gpu},
                      {"mem_peak_bytes", m.mem_peak_bytes}};
  j["mfu"] = m.mfu ? nlohmann::json(*m.mfu) : nlohmann::json(nullptr);
  if (m.moe) {
    j["moe_load_balancing_loss"] = m.moe->load_balancing_loss;
    j["moe_z_loss"] = m.moe->z_loss;
    j["moe_min_tokens_per_expert"] = m.moe->min_tokens_per_expert;
    j["moe_max_tokens_per_expert"] = m.moe->max_tokens_per_expert;
  }
  j["time_compute_ms"] = m.time.compute_ms;
  j["time_tp_comm_ms"] = m.time.tp_comm_ms;
  j["time_pp_wait_ms"] = m.time.pp_wait_ms;
  j["time_dp_comm_ms"] = m.time.dp_comm_ms;
  j["time_optimizer_ms"] = m.time.optimizer_ms;
  j["time_data_ms"] = m.time.data_ms;
  if (m.pp_bubble) j["pp_bubble"] = *m.pp_bubble;
  if (m.pp_bubble_theory) j["pp_bubble_theory"] = *m.pp_bubble_theory;
  write_line(file_, j);
}

void MetricsWriter::write_eval(int64_t iteration, double val_loss) {
  if (!file_) return;
  write_line(file_, {{"iteration", iteration}, {"val_loss", val_loss},
                     {"val_ppl", std::exp(std::min(val_loss, 20.0))}});
}

}  // namespace tripod::train
