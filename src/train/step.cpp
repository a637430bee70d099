// One training iteration (train/trainer.h): the pipeline schedule, then the
// optimizer (distributed/distributed_optimizer.h: gradient reductions, the
// global grad norm, AdamW) with the fp16 loss-scaling decisions around it;
// plus the per-rank memory report and the weight dump. TRIPOD_STEP_TIMING
// and the time split are train/time_split.h.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/philox.h"
#include "base/error.h"
#include "base/log.h"
#include "train/scalar_reduce.h"
#include "train/trainer.h"

namespace tripod::train {

// Megatron's train_step: zero the gradient buffers, run the forward-backward
// schedule over the micro-batches, reduce the gradients, take the global
// grad norm, clip, step at the scheduled lr. time_split_ marks the phases
// (train/time_split.h).
StepResult Trainer::train_step() {
  time_split_.begin_iteration();
  const int64_t B = args_.batch.micro_batch_size, T = model().config().seq_length;
  const int64_t tokens = B * T * num_microbatches_ * groups_.layout.dp;  // in the global batch
  ddp_->zero_grad_buffer();
  for (auto& m : models_)  // FP8: amaxes from zero, weights cast again at first use (model/fp8_meta.h)
    if (model::Fp8State* f = m->fp8_state()) f->begin_iteration();
  for (auto& g : fp8_gathers_) g->gather_from_values();  // --fp8-param-gather: this step's weights, in FP8
  StepResult r;
  // fp16: the loss gradient carries the loss scale, so every gradient is
  // scaled by it; the norm and the optimizer divide it out again.
  r.loss_scale = scaler_ ? scaler_->scale() : 1.0;
  stage_->begin(true, static_cast<float>(r.loss_scale / static_cast<double>(tokens)),
                backend::mix64(args_.seed, static_cast<uint64_t>(iteration_ + 1)),
                batches(*data_.train, consumed_samples_));
  r.schedule = parallel::run_pipeline_schedule(*stage_, *groups_.pp, schedule_config(false));
  time_split_.schedule_done();
  optimizer_->reduce_grads();
  if (args_.inject_grad_overflow_at == iteration_ + 1) inject_grad_overflow();
  r.lm_loss = reduce_loss(stage_->loss_sum()) / static_cast<double>(tokens);
  time_split_.optimizer_begin();
  r.grad_norm = optimizer_->get_grad_norm() / r.loss_scale;
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
  time_split_.grad_norm_done();
  if (!r.skipped) {
    const double clip = optim::clip_coefficient(r.grad_norm, args_.optimizer.clip_grad);
    const double decoupled_lr =
        decoupled_schedule_ ? decoupled_schedule_->lr_for_iteration(iteration_ + 1 - skipped_updates_) : -1;
    optimizer_->step(r.lr, static_cast<float>(clip / r.loss_scale), decoupled_lr);
  }
  // FP8 delayed scaling: amaxes reduced over tp and dp, histories rolled, new scales.
  for (auto& m : models_)
    if (model::Fp8State* f = m->fp8_state()) f->end_iteration(groups_.dp_cp.get());
  // MoE: the expert-bias update from this iteration's loads, and the metrics.
  if (model().config().moe.enabled()) {
    std::vector<model::GptModel*> chunks;
    for (auto& m : models_) chunks.push_back(m.get());
    // ZeRO-3 keeps the parameters as shards between uses: the expert bias
    // update reads and writes the whole bias, so the parameters are whole
    // for it (one all-gather) and go back to shards from the updated values.
    const bool shards = args_.parallel.ddp.shards_params() && model().config().moe.router_enable_expert_bias;
    if (shards) ddp_->materialize_params();
    r.moe = moe_end_iteration(chunks, groups_, be_);
    if (shards) ddp_->unmaterialize_params(true);
  }
  time_split_.optimizer_end(r.schedule, stage_->data_seconds(), iteration_ + 1, num_microbatches_);
  ++iteration_;
  consumed_samples_ += args_.batch.global_batch_size;
  return r;
}

// Testing aid (--inject-grad-overflow-at): makes one gradient infinite, as an
// fp16 overflow in the backward would.
void Trainer::inject_grad_overflow() {
  auto& params = model().params();
  model::Param* target = nullptr;
  for (auto& p : params.params())
    if (p.spec.layer >= 0) { target = &p; break; }
  if (!target) target = &params.params().front();
  TRIPOD_CHECK_HINT(target->grad.defined(), "use --data-parallel-sharding-strategy optim or no_shard with it",
                    "--inject-grad-overflow-at needs full gradients, which optim_grads(_params) does not keep");
  be_.scale(target->grad, std::numeric_limits<float>::infinity());
}

// Over dp x cp: each cp rank's sum covers its share of the tokens.
double Trainer::reduce_loss(double local_sum) { return all_reduce_scalar(groups_.dp_cp.get(), be_, local_sum); }

void Trainer::check_finite(double loss, double grad_norm) {
  if (std::isfinite(loss) && std::isfinite(grad_norm)) return;
  // Name the first parameter (in forward order) whose gradient is not finite.
  std::string first_bad = "none on this rank";
  for (auto& m : models_)
    for (const auto& p : m->params().params()) {
      if (!p.grad.defined()) continue;  // ZeRO-2/-3: only the shard holds gradients now
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

// Per-rank memory after the first iteration, next to Megatron's
// distributed-optimizer formula (bytes per parameter with bf16 params and
// fp32 grads: 18 replicated, 6 + 12 / dp sharded). tripod keeps fp32
// masters and fp32 grads (16 replicated, 8 + 8 / dp sharded) and, under
// --bf16/--fp16, a 2-byte compute copy. The allocator peak is itemised: the
// loss head's logits buffer (last stage; it doubles as the layers' scratch)
// and the rest (workspaces, communication buffers, temporaries).
void Trainer::log_memory(const StepResult& first) {
  int64_t n = 0;
  for (auto& m : models_) n += m->params().numel();
  const int64_t opt = 2 * optimizer_->shard_numel();
  // ZeRO-2/-3 keep the gradients / parameters as shards (besides the
  // buckets in use, which the allocator peak shows).
  const auto& ddp = args_.parallel.ddp;
  const double param_bytes = 4.0 * static_cast<double>(ddp.shards_params() ? opt / 2 : n);
  const double grad_bytes = 4.0 * static_cast<double>(ddp.shards_grads() ? opt / 2 : n);
  const double mib = 1.0 / (1 << 20);
  const size_t act = stage_->activation_bytes_per_microbatch();
  const DType dt = args_.precision.compute_dtype;
  // ZeRO-3 keeps no whole compute copy: each layer's is gathered when used
  // (with the allocator peak's "other").
  const double copy = dt == DType::F32 || ddp.shards_params() ? 0.0 : double(n) * double(dtype_size(dt));
  double logits = 0;
  if (model().config().num_layers > 0 && pp_rank_ == groups_.layout.pp - 1) {
    const int64_t N = args_.batch.micro_batch_size * model().config().seq_length;
    const int64_t V_tp = model().padded_vocab() / groups_.layout.tp, es = int64_t(dtype_size(dt));
    logits = double(config::head_chunk_rows(N, V_tp, es)) * double(V_tp) * double(es);
  }
  const double live = double(act) * double(first.schedule.max_live_microbatches);
  const double peak = double(be_.peak_memory_bytes());
  const double itemised = param_bytes + grad_bytes + 4.0 * double(opt) + copy + live + logits;
  log::info("memory on rank {} (tp {} pp {} dp {}): {} params; parameters {:.1f} MiB{}, gradients {:.1f} MiB, "
            "optimizer state {:.1f} MiB ({:.1f} bytes/param), activations {:.1f} MiB per micro-batch x {} live = "
            "{:.1f} MiB{}; allocator peak {:.1f} MiB (other: workspaces, communication buffers, temporaries "
            "{:.1f} MiB)",
            groups_.global_rank, tp_rank_, pp_rank_, dp_rank_, n, param_bytes * mib,
            copy > 0 ? fmt::format(" + {} compute copy {:.1f} MiB", dtype_name(dt), copy * mib) : "",
            grad_bytes * mib, opt * 4.0 * mib,
            (param_bytes + grad_bytes + 4.0 * static_cast<double>(opt)) / static_cast<double>(std::max<int64_t>(n, 1)),
            act * mib,
            first.schedule.max_live_microbatches, live * mib,
            logits > 0 ? fmt::format(", loss-head logits buffer {:.1f} MiB", logits * mib) : "", peak * mib,
            std::max(0.0, peak - itemised) * mib);
}

void Trainer::dump_weights(const std::string& dir) {
  ddp_->finish_param_sync();
  ddp_->materialize_params();
  const std::string path = fmt::format("{}/rank{}.bin", dir, groups_.global_rank);
  FILE* f = std::fopen(path.c_str(), "wb");
  TRIPOD_CHECK(f, "cannot write {}", path);
  auto put_i64 = [&](int64_t v) { std::fwrite(&v, 8, 1, f); };
  int64_t count = 0;
  for (auto& m : models_) count += static_cast<int64_t>(m->params().params().size());
  // An expert's replicas are the edp ranks: its copy on edp rank 0 goes as dp rank 0's.
  const int expert_dp_rank = groups_.edp ? groups_.edp->rank() : dp_rank_;
  put_i64(count);
  for (auto& m : models_)
    for (const auto& p : m->params().params()) {
      put_i64(static_cast<int64_t>(p.spec.name.size()));
      std::fwrite(p.spec.name.data(), 1, p.spec.name.size(), f);
      put_i64(static_cast<int64_t>(p.spec.shard));
      put_i64(groups_.layout.tp);
      put_i64(tp_rank_);
      put_i64(p.spec.expert >= 0 ? expert_dp_rank : dp_rank_);
      put_i64(static_cast<int64_t>(p.spec.global_shape.size()));
      for (int64_t d : p.spec.global_shape) put_i64(d);
      Tensor h = m->params().value_to_host(p);
      put_i64(h.numel());
      std::fwrite(h.raw(), 4, static_cast<size_t>(h.numel()), f);
    }
  std::fclose(f);
  ddp_->unmaterialize_params(false);
}

}  // namespace tripod::train
