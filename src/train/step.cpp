// One training iteration's reductions and optimizer step (train/trainer.h):
// grads of the tied embedding over the embedding group, sequence-parallel
// LayerNorm grads over tp, data-parallel averaging (all-reduce, or
// reduce-scatter with the distributed optimizer), the global grad norm, and
// AdamW (on this rank's shard, then all-gather, with the distributed
// optimizer: Megatron's DistributedOptimizer / ZeRO-1).
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/philox.h"
#include "base/debug_config.h"
#include "base/error.h"
#include "base/timer.h"
#include "base/log.h"
#include "parallel/tp_regions.h"
#include "train/scalar_reduce.h"
#include "train/trainer.h"

namespace tripod::train {

// TRIPOD_STEP_TIMING=1: synchronise between the phases of an iteration and
// log where the time goes (forward+backward schedule, reductions + grad
// norm, optimizer + compute-copy cast). Costs the overlap it measures.
namespace {
bool step_timing() {
  return debug_config().step_timing;
}
}  // namespace

StepResult Trainer::train_step() {
  const bool timing = step_timing();
  Timer phase;
  double t_sched = 0, t_norm = 0;
  // The time split (train/metrics.h): cumulative communicator times at the
  // start of the iteration; the differences are this iteration's.
  const double tp0 = comm_timers_.tp->seconds(), dp0 = comm_timers_.dp->seconds();
  const int64_t B = args_.micro_batch_size, T = model().config().seq_length;
  const int64_t tokens = B * T * num_microbatches_ * dp_size_;  // in the global batch
  for (auto& c : chunks_) {
    c.model->params().zero_grad();
    c.buckets->begin_grad_sync();
  }
  batch_ds_ = data_.train.get();
  batch_base_ = consumed_samples_;
  StepResult r;
  // fp16: the loss gradient carries the loss scale, so every gradient is
  // scaled by it; the norm and the optimizer divide it out again.
  r.loss_scale = scaler_ ? scaler_->scale() : 1.0;
  stage_->begin(true, static_cast<float>(r.loss_scale / static_cast<double>(tokens)),
                backend::mix64(args_.seed, static_cast<uint64_t>(iteration_ + 1)));
  r.schedule = parallel::run_pipeline_schedule(*stage_, *groups_.pp, schedule_config(false));
  if (timing) {
    be_.synchronize();
    t_sched = phase.millis();
    phase.reset();
  }
  reduce_gradients();
  if (args_.inject_grad_overflow_at == iteration_ + 1) inject_grad_overflow();
  r.lm_loss = reduce_loss(stage_->loss_sum()) / static_cast<double>(tokens);
  // Optimizer part of the time split: grad norm, clip, AdamW, compute-copy cast.
  Timer opt_timer;
  const double tp_opt0 = comm_timers_.tp->seconds(), dp_opt0 = comm_timers_.dp->seconds();
  r.grad_norm = global_grad_norm() / r.loss_scale;
  // As Megatron, the lr schedule advances with successful updates only, so
  // fp16 steps skipped at the start do not eat the warmup. (Checkpoints keep
  // the count of skipped steps with the loss-scaler state, so a resumed run
  // continues the same schedule.)
  r.lr = schedule_.lr_for_iteration(iteration_ + 1 - skipped_updates_);
  if (scaler_) {
    // Megatron's fp16 optimizer: an overflow anywhere skips the whole step
    // (the norm is summed over the model-parallel group, so every rank agrees).
    r.skipped = !std::isfinite(r.grad_norm);
    scaler_->update(r.skipped);
    if (r.skipped) ++skipped_updates_;
  } else {
    check_finite(r.lm_loss, r.grad_norm);
  }
  if (timing) {
    t_norm = phase.millis();  // the norm's host read already synchronised
    phase.reset();
  }
  if (!r.skipped) {
    const double clip = optim::clip_coefficient(r.grad_norm, args_.clip_grad);
    optimizer_step(r.lr, static_cast<float>(clip / r.loss_scale));
  }
  // The optimizer's own dp all-gather counts as dp comm, not optimizer.
  r.optimizer_seconds = std::max(0.0, opt_timer.seconds() - (comm_timers_.dp->seconds() - dp_opt0) -
                                          (comm_timers_.tp->seconds() - tp_opt0));
  if (timing) {
    be_.synchronize();
    log::info("step timing, iteration {}: forward+backward {:.2f} ms ({} micro-batches), loss read + "
              "reductions + grad norm {:.2f} ms, optimizer + weight cast {:.2f} ms", iteration_ + 1, t_sched,
              num_microbatches_, t_norm, phase.millis());
  }
  r.data_seconds = stage_->data_seconds();
  r.tp_comm_seconds = comm_timers_.tp->seconds() - tp0;
  r.dp_comm_seconds = comm_timers_.dp->seconds() - dp0;
  ++iteration_;
  consumed_samples_ += args_.global_batch_size;
  return r;
}

// Testing aid (--inject-grad-overflow-at): makes one gradient infinite, as an
// fp16 overflow in the backward would.
void Trainer::inject_grad_overflow() {
  auto& params = chunks_.front().model->params();
  model::Param* target = nullptr;
  for (auto& p : params.params())
    if (p.spec.layer >= 0) { target = &p; break; }
  if (!target) target = &params.params().front();
  be_.scale(target->grad, std::numeric_limits<float>::infinity());
}

void Trainer::sync_compute_weights() {
  for (auto& c : chunks_) c.model->params().sync_compute();
}

// With --overlap-grad-reduce, during the last micro-batch's backward of a
// chunk: a group of its parameters has final gradients. Sequence-parallel
// LayerNorm gradients are summed over tp right here (every tp rank reaches
// the same hook in the same order), then the buckets that became complete
// start their dp reduction.
void Trainer::on_grads_ready(int chunk, const std::vector<size_t>& params) {
  Chunk& c = chunks_.at(static_cast<size_t>(chunk));
  for (size_t i : params) {
    model::Param& p = c.model->params().params()[i];
    if (c.model->has_partial_sp_grad(p)) parallel::tensor_model_parallel_all_reduce(groups_.tp.get(), p.grad);
  }
  c.buckets->grads_ready(params);
}

void Trainer::reduce_gradients() {
  // With overlap the hooks already reduced the sequence-parallel grads.
  if (!overlap_grads())
    for (auto& c : chunks_) c.model->reduce_sequence_parallel_grads();
  // The output layer of the last stage is tied to the first stage's word
  // embedding: both copies get the sum of their gradients (Megatron's
  // embedding group), so they stay equal after identical updates. With
  // overlap, its bucket waits for this (NOTE [Deferred embedding bucket]).
  if (args_.pp > 1 && groups_.embd) {
    for (auto& c : chunks_) {
      const auto& st = c.model->stage();
      if (st.pre_process || st.post_process) groups_.embd->all_reduce(c.model->stage_params().embedding.word_embeddings->grad)->wait();
    }
  }
  if (dp_size_ == 1 && !args_.use_distributed_optimizer) return;
  // The loss is already scaled by 1/dp: the sum over dp is the average.
  // Without overlap nothing was launched yet (one bucket per chunk); with it,
  // the deferred embedding bucket is left.
  for (auto& c : chunks_) {
    TRIPOD_CHECK(!overlap_grads() || c.buckets->all_grads_ready(),
                 "model chunk {}: the backward did not report every parameter's gradient as final", &c - chunks_.data());
    c.buckets->launch_remaining();
  }
  for (auto& c : chunks_) c.buckets->finish_grad_sync();
}

// Megatron's clip_grad_norm_fp32: every parameter counted once. Sharded
// parameters count on every tp rank, replicated ones on tp rank 0 only
// (param_is_not_tensor_parallel_duplicate), the last stage's copy of the tied
// embedding not at all; summed over the model-parallel group, and over dp
// too when each dp rank holds a different shard (distributed optimizer).
double Trainer::global_grad_norm() {
  Tensor acc = be_.empty({1}, DType::F32);
  be_.zero(acc);
  // The counted ranges (counts_in_grad_norm) were merged once at set-up.
  for (auto& c : chunks_) {
    const Tensor& grads = c.buckets->reduced_grads();
    for (const auto& seg : c.norm_segments) be_.sum_squares(acc, grads.flat(seg.offset, {seg.numel}));
  }
  auto& group = args_.use_distributed_optimizer ? groups_.world : groups_.mp;
  if (group->size() > 1) group->all_reduce(acc)->wait();
  Tensor h = Tensor::empty({1}, DType::F32);
  be_.copy(h, acc);
  be_.synchronize();
  return std::sqrt(static_cast<double>(h.data<float>()[0]));
}

void Trainer::optimizer_step(double lr, float clip) {
  finish_param_gather();  // normally already waited for by the forwards
  for (auto& c : chunks_) {
    auto& params = c.model->params();
    if (!args_.use_distributed_optimizer) {
      c.optimizer->step(params.values(), params.grads(), c.segments, lr, clip);
      continue;
    }
    // Step the fp32 master shard, then all-gather the updated parameters
    // (with --overlap-param-gather: launched now, waited per bucket by the
    // next forward, which also casts the compute copies).
    c.buckets->take_shard(c.value_shard, params.values());
    c.optimizer->step(c.value_shard, c.buckets->reduced_grads(), c.segments, lr, clip);
    if (overlap_params())
      c.buckets->start_param_gather(c.value_shard);
    else
      c.buckets->gather_shards(params.values(), c.value_shard);
  }
  if (!overlap_params()) sync_compute_weights();  // bf16/fp16 compute copies from the updated fp32 masters
}

void Trainer::finish_param_gather() {
  for (auto& c : chunks_) c.buckets->finish_param_gather();
}

double Trainer::reduce_loss(double local_sum) { return all_reduce_scalar(groups_.dp.get(), be_, local_sum); }

void Trainer::check_finite(double loss, double grad_norm) {
  if (std::isfinite(loss) && std::isfinite(grad_norm)) return;
  // Name the first parameter (in forward order) whose gradient is not finite.
  std::string first_bad = "none on this rank";
  for (auto& c : chunks_)
    for (const auto& p : c.model->params().params()) {
      Tensor acc = be_.empty({1}, DType::F32);
      be_.zero(acc);
      be_.sum_squares(acc, p.grad);
      Tensor h = Tensor::empty({1}, DType::F32);
      be_.copy(h, acc);
      be_.synchronize();
      if (first_bad == "none on this rank" && !std::isfinite(h.data<float>()[0])) first_bad = p.spec.name;
    }
  TRIPOD_CHECK_HINT(false, "lower --lr, raise --lr-warmup-iters, check --clip-grad, or check the data",
                    "non-finite {} at iteration {}: lm loss {}, grad norm {}; first parameter with a "
                    "non-finite gradient: {}", std::isfinite(loss) ? "grad norm" : "loss", iteration_ + 1,
                    loss, grad_norm, first_bad);
}

std::pair<Tensor, Tensor> Trainer::optimizer_state(int chunk) {
  Chunk& c = chunks_.at(static_cast<size_t>(chunk));
  if (!args_.use_distributed_optimizer) return {c.optimizer->exp_avg(), c.optimizer->exp_avg_sq()};
  // Full-parameter order (the checkpoint format), whatever the shard layout.
  const int64_t total = c.model->params().padded_numel();
  Tensor m = be_.empty({total}, DType::F32), v = be_.empty({total}, DType::F32);
  c.buckets->gather_shards(m, c.optimizer->exp_avg());
  c.buckets->gather_shards(v, c.optimizer->exp_avg_sq());
  return {m, v};
}

void Trainer::set_optimizer_state(const Tensor& exp_avg, const Tensor& exp_avg_sq, int64_t steps, int chunk) {
  Chunk& c = chunks_.at(static_cast<size_t>(chunk));
  c.buckets->take_shard(c.optimizer->exp_avg(), exp_avg);
  c.buckets->take_shard(c.optimizer->exp_avg_sq(), exp_avg_sq);
  c.optimizer->set_steps(steps);
}

// Per-rank memory after the first iteration, next to Megatron's
// distributed-optimizer formula (bytes per parameter with bf16 params and
// fp32 grads: 18 replicated, 6 + 12 / dp sharded). tripod's CPU path keeps
// fp32 params and grads: 16 replicated, 8 + 8 / dp sharded.
void Trainer::log_memory(const StepResult& first) {
  int64_t n = 0, opt = 0;
  for (auto& c : chunks_) {
    n += c.model->params().numel();
    opt += 2 * c.buckets->shard_numel();
  }
  const double mib = 1.0 / (1 << 20);
  const size_t act = stage_->activation_bytes_per_microbatch();
  log::info("memory on rank {} (tp {} pp {} dp {}): {} params; parameters {:.1f} MiB, gradients {:.1f} MiB, "
            "optimizer state {:.1f} MiB ({:.1f} bytes/param), activations {:.1f} MiB per micro-batch x {} live = "
            "{:.1f} MiB; allocator peak {:.1f} MiB",
            groups_.global_rank, tp_rank_, pp_rank_, dp_rank_, n, n * 4.0 * mib, n * 4.0 * mib, opt * 4.0 * mib,
            8.0 + 4.0 * static_cast<double>(opt) / static_cast<double>(std::max<int64_t>(n, 1)), act * mib,
            first.schedule.max_live_microbatches, act * mib * first.schedule.max_live_microbatches,
            be_.peak_memory_bytes() * mib);
}

void Trainer::dump_weights(const std::string& dir) {
  finish_param_gather();
  const std::string path = fmt::format("{}/rank{}.bin", dir, groups_.global_rank);
  FILE* f = std::fopen(path.c_str(), "wb");
  TRIPOD_CHECK(f, "cannot write {}", path);
  auto put_i64 = [&](int64_t v) { std::fwrite(&v, 8, 1, f); };
  int64_t count = 0;
  for (auto& c : chunks_) count += static_cast<int64_t>(c.model->params().params().size());
  put_i64(count);
  for (auto& c : chunks_)
    for (const auto& p : c.model->params().params()) {
      put_i64(static_cast<int64_t>(p.spec.name.size()));
      std::fwrite(p.spec.name.data(), 1, p.spec.name.size(), f);
      put_i64(static_cast<int64_t>(p.spec.shard));
      put_i64(args_.tp);
      put_i64(tp_rank_);
      put_i64(dp_rank_);
      put_i64(static_cast<int64_t>(p.spec.global_shape.size()));
      for (int64_t d : p.spec.global_shape) put_i64(d);
      Tensor h = c.model->params().value_to_host(p);
      put_i64(h.numel());
      std::fwrite(h.raw(), 4, static_cast<size_t>(h.numel()), f);
    }
  std::fclose(f);
}

}  // namespace tripod::train
