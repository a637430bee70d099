// Implementation of train/train_args.h: the derived values, in one place.
#include "train/train_args.h"

#include <algorithm>

#include "base/error.h"

namespace tripod::train {

void apply_model_flags(const ModelFlagSpelling& f, config::GptConfig& m) {
  using P = config::GptConfig::Position;
  std::string pos = f.position_embedding_type;
  if (f.use_rotary_position_embeddings) {
    TRIPOD_CHECK_HINT(pos.empty() || pos == "rope", "pass one of them",
                      "--use-rotary-position-embeddings contradicts --position-embedding-type {}", pos);
    pos = "rope";
  }
  if (pos == "learned_absolute") m.position_embedding_type = P::LearnedAbsolute;
  else if (pos == "rope") m.position_embedding_type = P::Rope;
  else if (pos == "none") m.position_embedding_type = P::None;
  else if (!pos.empty())
    throw Error(fmt::format("--position-embedding-type {} is not one of learned_absolute, rope, none", pos),
                "Llama-family models use --position-embedding-type rope");
  // Megatron: --no-position-embedding drops the learned table; with the
  // default type that leaves no position information at all.
  if (f.no_position_embedding && m.position_embedding_type == P::LearnedAbsolute) m.position_embedding_type = P::None;
  const std::string& norm = f.normalization;
  if (norm == "LayerNorm") m.normalization = config::GptConfig::Norm::LayerNorm;
  else if (norm == "RMSNorm") m.normalization = config::GptConfig::Norm::RMSNorm;
  else if (!norm.empty())
    throw Error(fmt::format("--normalization {} is not one of LayerNorm, RMSNorm", norm),
                "Llama-family models use --normalization RMSNorm");
  // --num-query-groups without --group-query-attention is ignored, as in Megatron.
  if (f.disable_bias_linear) m.add_bias_linear = false;
}

void apply_fp8_flags(const PrecisionArgs& p, config::GptConfig& m) {
  config::Fp8Config& f = m.fp8;
  if (p.fp8_format.empty()) {
    f.format = config::Fp8Format::None;
  } else if (auto v = config::fp8_format_from_string(p.fp8_format)) {
    f.format = *v;
  } else {
    throw Error(fmt::format("--fp8-format {} is not one of e4m3, hybrid", p.fp8_format),
                "use --fp8-format hybrid (E4M3 forward, E5M2 gradients: Megatron's usual choice) or e4m3");
  }
  if (auto r = config::fp8_recipe_from_string(p.fp8_recipe)) {
    f.recipe = *r;
  } else if (p.fp8_recipe == "mxfp8") {
    throw Error("--fp8-recipe mxfp8 is not supported: MXFP8 (32-element blocks with E8M0 scales) needs the MX "
                "GEMMs of Blackwell GPUs (sm_100), which the backend does not call",
                "use --fp8-recipe delayed (the default), tensorwise or blockwise");
  } else {
    throw Error(fmt::format("--fp8-recipe {} is not one of delayed, tensorwise, blockwise", p.fp8_recipe),
                "use --fp8-recipe delayed (the default), tensorwise or blockwise");
  }
  if (auto a = config::amax_compute_algo_from_string(p.fp8_amax_compute_algo))
    f.amax_compute_algo = *a;
  else
    throw Error(fmt::format("--fp8-amax-compute-algo {} is not one of most_recent, max", p.fp8_amax_compute_algo),
                "use --fp8-amax-compute-algo most_recent (the default) or max");
}

// NOTE [bf16 gradient communication]: --grad-reduce-in-bf16 and Megatron-
// FSDP's dtype flags, with Megatron's "auto" chain (comm -> main grads ->
// the compute dtype). tripod keeps main parameters and the accumulation of
// gradients in fp32; only what the reduction moves can be bf16.
static DType resolve_grad_comm_dtype(const ParallelArgs& p, const PrecisionArgs& pr) {
  const std::string compute = pr.bf16 ? "bf16" : pr.fp16 ? "fp16" : "fp32";
  auto check_value = [](const std::string& flag, const std::string& v, std::initializer_list<const char*> ok) {
    for (const char* o : ok)
      if (v == o) return;
    throw Error(fmt::format("{} {}: not one of fp32, bf16, fp16, auto", flag, v),
                fmt::format("pass {} fp32, bf16 or auto", flag));
  };
  if (!p.fsdp_main_params_dtype.empty()) {
    check_value("--megatron-fsdp-main-params-dtype", p.fsdp_main_params_dtype, {"fp32", "bf16", "fp16", "auto"});
    const std::string v = p.fsdp_main_params_dtype == "auto" ? compute : p.fsdp_main_params_dtype;
    TRIPOD_CHECK_HINT(v == "fp32", "pass --megatron-fsdp-main-params-dtype fp32 (or drop it)",
                      "--megatron-fsdp-main-params-dtype {} asks for {} main parameters; tripod's optimizer steps "
                      "fp32 main parameters",
                      p.fsdp_main_params_dtype, v);
  }
  std::string main_grads = p.fsdp_main_grads_dtype.empty() ? "auto" : p.fsdp_main_grads_dtype;
  check_value("--megatron-fsdp-main-grads-dtype", main_grads, {"fp32", "bf16", "fp16", "auto"});
  if (main_grads == "auto") main_grads = compute;
  std::string comm = p.fsdp_grad_comm_dtype.empty() ? "fp32" : p.fsdp_grad_comm_dtype;
  check_value("--megatron-fsdp-grad-comm-dtype", comm, {"fp32", "bf16", "fp16", "auto"});
  if (comm == "auto") comm = main_grads;
  TRIPOD_CHECK_HINT(comm != "fp16", "reduce gradients in bf16 or fp32 (--megatron-fsdp-grad-comm-dtype bf16|fp32)",
                    "fp16 gradient communication{} is not supported (it would need the loss scale in the "
                    "reduction)",
                    p.fsdp_grad_comm_dtype == "auto" ? " (auto under --fp16)" : "");
  TRIPOD_CHECK_HINT(!(p.grad_reduce_in_bf16 && p.fsdp_grad_comm_dtype == "fp32"), "pass one of them",
                    "--grad-reduce-in-bf16 and --megatron-fsdp-grad-comm-dtype fp32 contradict each other");
  if (!p.outer_dp_sharding_strategy.empty())
    TRIPOD_CHECK_HINT(p.outer_dp_sharding_strategy == "no_shard",
                      "pass --outer-dp-sharding-strategy no_shard (the instances replicate) or drop it",
                      "--outer-dp-sharding-strategy {}: sharding the optimizer state across the "
                      "--num-distributed-optimizer-instances is not in tripod yet (they replicate it)",
                      p.outer_dp_sharding_strategy);
  return p.grad_reduce_in_bf16 || comm == "bf16" ? DType::BF16 : DType::F32;
}

void TrainArgs::finalize() {
  apply_model_flags(model_flags, model);
  auto& ddp = parallel.ddp;
  ddp.sharding = distributed::resolve_sharding_strategy(parallel.data_parallel_sharding_strategy,
                                                        parallel.use_megatron_fsdp, ddp.use_distributed_optimizer);
  ddp.use_distributed_optimizer = ddp.sharding >= distributed::ShardingStrategy::Optim;
  ddp.grad_comm_dtype = resolve_grad_comm_dtype(parallel, precision);
  apply_fp8_flags(precision, model);
  if (model.fp8.param_gather) {
    TRIPOD_CHECK_HINT(model.fp8.enabled(), "add --fp8-format hybrid (or e4m3), or drop --fp8-param-gather",
                      "--fp8-param-gather needs FP8 GEMMs (--fp8-format)");
    TRIPOD_CHECK_HINT(ddp.use_distributed_optimizer,
                      "add --use-distributed-optimizer (or --data-parallel-sharding-strategy optim or optim_grads)",
                      "--fp8-param-gather needs the distributed optimizer: it gathers the optimizer's shards");
    TRIPOD_CHECK_HINT(!ddp.shards_params(),
                      "use --data-parallel-sharding-strategy optim or optim_grads with it, or drop the flag",
                      "--fp8-param-gather with optim_grads_params (ZeRO-3) is not supported yet: its per-layer "
                      "gathers move the compute dtype");
    model.fp8.check_param_gather_recipe();
  }
  model.fp8.check_dot_product_attention(parallel.cp);
  model.fp8.check_high_precision_wgrad();
  auto& o = optimizer;
  if (o.lr_warmup_fraction >= 0) {
    // Megatron: warmup = fraction x decay steps; here in whole iterations
    // (whole samples in a --train-samples run).
    TRIPOD_CHECK_HINT(o.lr.warmup_iters == 0 && o.lr_warmup_samples == 0, "pass one of them",
                      "--lr-warmup-fraction and --lr-warmup-{} are both given",
                      o.lr.warmup_iters ? "iters" : "samples");
    TRIPOD_CHECK(o.lr_warmup_fraction <= 1, "--lr-warmup-fraction {} is above 1", o.lr_warmup_fraction);
    if (batch.train_samples > 0) {
      const int64_t decay = o.lr_decay_samples > 0 ? o.lr_decay_samples : batch.train_samples;
      o.lr_warmup_samples = static_cast<int64_t>(o.lr_warmup_fraction * static_cast<double>(decay));
    } else {
      const int64_t decay = o.lr.decay_iters > 0 ? o.lr.decay_iters : batch.train_iters;
      o.lr.warmup_iters = static_cast<int64_t>(o.lr_warmup_fraction * static_cast<double>(decay));
    }
    o.lr_warmup_fraction = -1;  // applied
  }
}

std::vector<int> profile_ranks(const LoggingArgs& l, int world_size) {
  std::vector<int> out;
  for (const std::string& s : l.profile_ranks) {
    size_t used = 0;
    int r = -1;
    try {
      r = std::stoi(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TRIPOD_CHECK_HINT(used == s.size() && r >= 0 && (world_size == 0 || r < world_size),
                      fmt::format("pass global ranks from 0 to {} to --profile-ranks", world_size > 0 ? world_size - 1 : 0),
                      "--profile-ranks {}: not a rank of this job{}", s,
                      world_size > 0 ? fmt::format(" ({} ranks)", world_size) : std::string());
    out.push_back(r);
  }
  return out;
}

// Megatron's sample-based run (--train-samples): train_iters = train
// samples // global batch (the remainder is not trained), and the lr
// schedule counts samples, stepped by the global batch each iteration.
void TrainArgs::resolve_sample_based_run() {
  auto& o = optimizer;
  auto& lr = o.lr;
  const int64_t gb = batch.global_batch_size;
  if (sample_based_run_resolved_) return;
  if (batch.train_samples <= 0) {
    TRIPOD_CHECK_HINT(o.lr_warmup_samples == 0 && o.lr_decay_samples == 0,
                      "pass --train-samples for a sample-based run, or give the schedule in iterations "
                      "(--lr-warmup-iters, --lr-decay-iters)",
                      "--lr-warmup-samples / --lr-decay-samples count the samples of a --train-samples run, and "
                      "this run counts --train-iters");
    return;
  }
  TRIPOD_CHECK_HINT(batch.train_iters == 0, "pass one of them (Megatron takes one or the other)",
                    "--train-iters {} and --train-samples {} are both given", batch.train_iters, batch.train_samples);
  TRIPOD_CHECK_HINT(lr.warmup_iters == 0 && lr.decay_iters == 0,
                    "give the schedule in samples: --lr-warmup-samples, --lr-decay-samples (or --lr-warmup-fraction)",
                    "--lr-warmup-iters / --lr-decay-iters count iterations, and this --train-samples run counts "
                    "samples");
  batch.train_iters = batch.train_samples / gb;
  TRIPOD_CHECK_HINT(batch.train_iters > 0, "raise --train-samples to at least the global batch size",
                    "--train-samples {} is less than one global batch ({} samples)", batch.train_samples, gb);
  lr.steps_per_iteration = gb;
  lr.warmup_iters = o.lr_warmup_samples;
  lr.decay_iters = o.lr_decay_samples > 0 ? o.lr_decay_samples : batch.train_samples;
  sample_based_run_resolved_ = true;
}

void TrainArgs::resolve(const parallel::Layout& layout) {
  model.finalize();  // the derived widths, and the model's rules checked before any use
  if (batch.global_batch_size == 0) batch.global_batch_size = batch.micro_batch_size * layout.dp;
  auto& lr = optimizer.lr;
  resolve_sample_based_run();
  if (lr.decay_iters <= 0) lr.decay_iters = batch.train_iters;
  lr.style = optim::decay_style_from_name(optimizer.lr_decay_style);
  precision.compute_dtype = precision.bf16 ? DType::BF16 : precision.fp16 ? DType::F16 : DType::F32;
  auto& p = parallel;
  p.recompute = p.recompute_granularity == "full" ? config::Recompute::Full
                : (p.recompute_activations || p.recompute_granularity == "selective") ? config::Recompute::Selective
                                                                                      : config::Recompute::None;
  auto& ls = precision.loss_scaler;
  if (ls.static_scale > 0) ls.min_scale = std::min(ls.min_scale, ls.static_scale);
  // Megatron's sample counts per split: train_iters x global batch, one
  // validation run per --eval-interval (and one at the end), one test run.
  data.vocab_size = model.vocab_size;
  data.padded_vocab_size = model.padded_vocab_size(layout.tp);
  data.seq_length = model.seq_length;
  data.seed = seed;
  const int64_t gb = batch.global_batch_size;
  // A --train-samples run builds its sample index for exactly that many
  // samples, as Megatron's, so the data order is Megatron's.
  data.train_samples = batch.train_samples > 0 ? batch.train_samples : batch.train_iters * gb;
  const int64_t evals = logging.eval_interval > 0 ? batch.train_iters / logging.eval_interval + 1 : 0;
  data.valid_samples = evals * logging.eval_iters * gb;
  data.test_samples = logging.eval_iters * gb;
}

}  // namespace tripod::train
