// Implementation of train/trainer.h: set-up, the loop, evaluation, logging.
// One iteration (train_step, the memory report, the weight dump) is in step.cpp.
#include "train/trainer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <optional>

#include "backend/philox.h"
#include "base/debug_config.h"
#include "base/fault_injection.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timer.h"
#include "ckpt/sharded_checkpoint.h"
#include "train/exit_signal.h"
#include "train/scalar_reduce.h"

namespace tripod::train {

void check_args(const TrainArgs& a, const parallel::Layout* layout, ErrorList& problems) {
  const auto& b = a.batch;
  const auto& p = a.parallel;
  TRIPOD_CHECK_INTO(problems, b.train_iters > 0 || b.train_samples > 0,
                    "pass --train-iters N (or Megatron's --train-samples N)", "--train-iters is {}", b.train_iters);
  TRIPOD_CHECK_INTO(problems, b.micro_batch_size > 0, "pass --micro-batch-size N (N >= 1)",
                    "--micro-batch-size is {}", b.micro_batch_size);
  TRIPOD_CHECK_INTO(problems, p.etp <= 1 || a.model.moe.enabled(), "drop --expert-tensor-parallel-size, or pass --num-experts",
                    "--expert-tensor-parallel-size {} without experts", p.etp);
  TRIPOD_CHECK_INTO(problems, !layout || layout->ep == 1 || a.model.moe.enabled(),
                    "drop --expert-model-parallel-size, or pass --num-experts",
                    "--expert-model-parallel-size {} without experts", layout ? layout->ep : 1);
  TRIPOD_CHECK_INTO(problems, !layout || layout->tp == 1 || p.sequence_parallel || !a.model.moe.enabled(),
                    "add --sequence-parallel (MoE layers under tensor parallelism route each tp rank's own tokens, "
                    "as Megatron)",
                    "MoE layers (--num-experts) with --tensor-model-parallel-size {} need --sequence-parallel",
                    layout ? layout->tp : 1);
  const int64_t dp = layout ? layout->dp : 1;
  TRIPOD_CHECK_INTO(problems, !layout || b.micro_batch_size <= 0 || b.global_batch_size % (b.micro_batch_size * dp) == 0,
                    fmt::format("use a --global-batch-size that is a multiple of {} (micro batch {} x data-parallel {})",
                                b.micro_batch_size * dp, b.micro_batch_size, dp),
                    "--global-batch-size {} is not divisible by --micro-batch-size {} x data-parallel size {}",
                    b.global_batch_size, b.micro_batch_size, dp);
  TRIPOD_CHECK_INTO(problems, !layout || a.model.num_layers % layout->pp == 0,
                    "choose a --pipeline-model-parallel-size that divides --num-layers",
                    "--num-layers {} is not divisible by --pipeline-model-parallel-size {}", a.model.num_layers,
                    layout ? layout->pp : 1);
  TRIPOD_CHECK_INTO(problems, a.logging.log_interval > 0, "use --log-interval >= 1", "--log-interval is {}",
                    a.logging.log_interval);
  const auto& pr = a.precision;
  TRIPOD_CHECK_INTO(problems, !(pr.bf16 && pr.fp16), "pass only one of --bf16 and --fp16",
                    "--bf16 and --fp16 are mutually exclusive");
  TRIPOD_CHECK_INTO(problems, p.recompute_granularity.empty() || p.recompute_granularity == "full" ||
                        p.recompute_granularity == "selective",
                    "use --recompute-granularity full or selective", "unknown --recompute-granularity '{}'",
                    p.recompute_granularity);
  TRIPOD_CHECK_INTO(problems, pr.fp16 || pr.loss_scaler.static_scale == 0,
                    "loss scaling applies to --fp16 only; drop --loss-scale", "--loss-scale {} without --fp16",
                    pr.loss_scaler.static_scale);
  const auto& ddp = p.ddp;
  TRIPOD_CHECK_INTO(problems, ddp.bucket_size >= 0, "pass --ddp-bucket-size N with N >= 1 elements, or leave it out",
                    "--ddp-bucket-size is {}", ddp.bucket_size);
  TRIPOD_CHECK_INTO(problems, !ddp.overlap_param_gather || ddp.use_distributed_optimizer,
                    "add --use-distributed-optimizer (the all-gather of updated parameters exists only with it), "
                    "or drop --overlap-param-gather",
                    "--overlap-param-gather needs --use-distributed-optimizer");
  TRIPOD_CHECK_INTO(problems, !ddp.overlap_param_gather || ddp.overlap_grad_reduce,
                    "add --overlap-grad-reduce, or drop --overlap-param-gather",
                    "--overlap-param-gather needs --overlap-grad-reduce (as in Megatron)");
  const int instances = ddp.num_distributed_optimizer_instances;
  TRIPOD_CHECK_INTO(problems, instances == 1 || (instances > 1 && ddp.use_distributed_optimizer),
                    "add --use-distributed-optimizer (or --data-parallel-sharding-strategy optim, optim_grads or "
                    "optim_grads_params), or drop --num-distributed-optimizer-instances",
                    "--num-distributed-optimizer-instances {} needs the distributed optimizer (N >= 1)", instances);
  TRIPOD_CHECK_INTO(problems, !layout || instances < 1 || (layout->dp * layout->cp) % instances == 0,
                    "pass a --num-distributed-optimizer-instances that divides the data-parallel size",
                    "--num-distributed-optimizer-instances {} does not divide data-parallel x context-parallel "
                    "size {}", instances, layout ? layout->dp * layout->cp : 1);
  problems.collect([&] {
    const std::vector<config::CpCommType> types = model::cp_comm_types_from_flag(p.cp_comm_type, a.model.num_layers);
    if (!layout || layout->cp <= 1) return;
    for (config::CpCommType t : types)
      if (t == config::CpCommType::A2a)
        return model::check_context_parallel_heads(a.model.num_attention_heads, a.model.query_groups(), layout->tp,
                                                   layout->cp);
  });
  if (layout && layout->cp > 1)
    problems.collect([&] { model::check_context_parallel_seq_length(a.model.seq_length, layout->cp); });
  const auto& lg = a.logging;
  TRIPOD_CHECK_INTO(problems, !lg.profile || (lg.profile_step_start >= 0 && lg.profile_step_end > lg.profile_step_start),
                    "pass --profile-step-start S and --profile-step-end E with 0 <= S < E (iterations S+1 to E are "
                    "profiled)",
                    "--profile-step-start {} and --profile-step-end {} give no iterations to profile",
                    lg.profile_step_start, lg.profile_step_end);
  if (lg.profile) problems.collect([&] { profile_ranks(lg, layout ? layout->world_size : 0); });
}

void validate_args(const TrainArgs& a, const parallel::Layout& layout) {
  ErrorList problems;
  check_args(a, &layout, problems);
  problems.collect([&] { virtual_pipeline_size(a); });
  problems.throw_if_any("with the command line");
}

void check_command_line(const TrainArgs& a, int world_size, ErrorList& problems) {
  int vpp = 1;
  problems.collect([&] { vpp = virtual_pipeline_size(a); });
  std::optional<parallel::Layout> layout;
  problems.collect(
      [&] { layout = parallel::Layout::make(world_size, a.parallel.tp, a.parallel.pp, vpp, a.parallel.cp); });
  check_args(a, layout ? &*layout : nullptr, problems);  // without a layout: the checks that need none
}

int expert_tensor_parallel_size(const TrainArgs& a) {
  if (a.parallel.etp > 0) return a.parallel.etp;
  return a.model.moe.enabled() ? std::max(a.parallel.tp, 1) : 1;
}

int virtual_pipeline_size(const TrainArgs& a) {
  const auto& p = a.parallel;
  int v = p.virtual_pipeline_size > 0 ? p.virtual_pipeline_size : 1;
  if (p.num_layers_per_virtual_stage > 0) {
    const int64_t per_rank = a.model.num_layers / p.pp;
    TRIPOD_CHECK_HINT(per_rank % p.num_layers_per_virtual_stage == 0,
                      "choose --num-layers-per-virtual-pipeline-stage dividing --num-layers / --pipeline-model-parallel-size",
                      "--num-layers {} / --pipeline-model-parallel-size {} = {} layers per rank is not divisible by "
                      "--num-layers-per-virtual-pipeline-stage {}", a.model.num_layers, p.pp, per_rank,
                      p.num_layers_per_virtual_stage);
    v = static_cast<int>(per_rank / p.num_layers_per_virtual_stage);
  }
  TRIPOD_CHECK_HINT(v == 1 || p.pp > 1, "interleaving needs --pipeline-model-parallel-size >= 2",
                    "a virtual pipeline of {} stages per rank needs pipeline parallelism", v);
  TRIPOD_CHECK_HINT(a.model.num_layers % (static_cast<int64_t>(p.pp) * v) == 0,
                    "choose sizes so that --num-layers divides into pp x virtual stages",
                    "--num-layers {} is not divisible by {} pipeline stages x {} virtual stages", a.model.num_layers,
                    p.pp, v);
  return v;
}

namespace {
std::string sharding_note(const distributed::DistributedDataParallelConfig& ddp) {
  using S = distributed::ShardingStrategy;
  const int n = ddp.num_distributed_optimizer_instances;
  if (n > 1 && ddp.sharding != S::NoShard)  // NOTE [Distributed-optimizer instances] in parallel/groups.h
    return fmt::format(", data-parallel sharding {} within each of {} distributed-optimizer instances (hybrid)",
                       distributed::sharding_strategy_name(ddp.sharding), n);
  switch (ddp.sharding) {
    case S::NoShard: return "";
    case S::Optim: return ", distributed optimizer";
    case S::OptimGrads: return ", data-parallel sharding optim_grads (ZeRO-2: optimizer state and gradients)";
    case S::OptimGradsParams:
      return ", data-parallel sharding optim_grads_params (ZeRO-3: optimizer state, gradients and parameters)";
  }
  return "";
}
}  // namespace

Trainer::Trainer(const TrainArgs& args, backend::Backend& be, const parallel::ProcessGroups* groups)
    : args_(args), be_(be) {
  if (groups) groups_ = *groups;
  setup(nullptr);
}

Trainer::Trainer(const TrainArgs& args, backend::Backend& be, data::DatasetSplits data,
                 const parallel::ProcessGroups* groups)
    : args_(args), be_(be) {
  if (groups) groups_ = *groups;
  setup(&data);
}

Trainer::~Trainer() = default;

// The layout (tp, pp, dp, vpp) is the process groups' from here on; the
// flags asked for it when the job was assembled (train/job.h).
void Trainer::setup(data::DatasetSplits* given) {
  args_.finalize();
  if (!groups_.world) {  // a single process: size-1 groups (the layout flags must ask for that)
    own_ctx_ = comm::DistContext::init(comm::RankInfo{}, be_.device().type, std::chrono::minutes(10));
    const auto& p = args_.parallel;
    groups_ = parallel::make_process_groups(
        *own_ctx_, parallel::Layout::make(1, p.tp, p.pp, virtual_pipeline_size(args_), p.cp)
                        .with_expert_parallel(p.ep, expert_tensor_parallel_size(args_)));
  }
  // Timing decorators on the groups before models and buckets take them.
  time_split_ = TimeSplitAccumulator(parallel::time_communication(groups_), &be_, debug_config().step_timing);
  const auto& L = groups_.layout;
  validate_args(args_, L);
  // FP8 attention the backend cannot serve stops here, before the model is
  // built, with the reason its first call would give.
  if (const auto& m = args_.model; m.fp8.enabled() && m.fp8.dot_product_attention) {
    const std::string why = be_.fp8_attention_note(m.head_size());
    TRIPOD_CHECK_HINT(why.empty(), "leave out --fp8-dot-product-attention (attention then runs in the compute dtype)",
                      "--fp8-dot-product-attention on {}: {}", be_.name(), why);
  }
  args_.resolve(L);
  tp_rank_ = L.tp_rank(groups_.global_rank);
  dp_rank_ = L.dp_rank(groups_.global_rank);
  pp_rank_ = L.pp_rank(groups_.global_rank);
  const auto& b = args_.batch;
  cp_rank_ = L.cp_rank(groups_.global_rank);
  num_microbatches_ = b.global_batch_size / (b.micro_batch_size * L.dp);
  if (args_.logging.profile) {
    const std::vector<int> ranks = profile_ranks(args_.logging, L.world_size);
    profiling_ = std::find(ranks.begin(), ranks.end(), groups_.global_rank) != ranks.end();
  }
  parallel::validate_schedule_config(schedule_config(false));
  build_chunks();

  schedule_ = args_.optimizer.lr;
  schedule_.validate();
  if (const auto& o = args_.optimizer; o.decoupled_lr >= 0) {
    decoupled_schedule_ = schedule_;
    decoupled_schedule_->max_lr = o.decoupled_lr;
    decoupled_schedule_->min_lr = o.decoupled_min_lr >= 0 ? o.decoupled_min_lr : schedule_.min_lr;
    TRIPOD_CHECK_HINT(decoupled_schedule_->min_lr <= o.decoupled_lr,
                      "set --decoupled-min-lr (or, without it, --min-lr) at or below --decoupled-lr",
                      "--decoupled-lr {} is below its minimum {}", o.decoupled_lr, decoupled_schedule_->min_lr);
  }

  {
    // The data lines once per job (rank 0), as Megatron prints them.
    const log::ScopedMinLevel once(groups_.global_rank == 0 ? log::Level::Debug : log::Level::Warn);
    data_ = given ? std::move(*given) : data::build_gpt_datasets(args_.data);
  }
  TRIPOD_CHECK(data_.train, "no training dataset");
  metrics_ = std::make_unique<MetricsWriter>(is_logger() ? args_.logging.metrics_file : std::string());
  tensorboard_ = std::make_unique<TensorBoardWriter>(is_logger() ? args_.logging.tensorboard_dir : std::string());
  if (args_.precision.fp16) scaler_ = std::make_unique<LossScaler>(args_.precision.loss_scaler);

  std::vector<model::GptModel*> models;
  for (auto& m : models_) models.push_back(m.get());
  // Context parallelism: each cp rank runs T / cp rows of every sequence (NOTE [Load-balanced chunks]).
  stage_ = std::make_unique<GptPipelineStage>(models, b.micro_batch_size, model().config().seq_length / L.cp);
  // Data-parallel overlap: the DDP's hooks run during the last micro-batch.
  stage_->set_param_hooks(static_cast<int>(num_microbatches_) - 1, ddp_->grad_ready_hook(), ddp_->param_use_hook());
}

// Chunk c of pp rank r is virtual stage s = c * pp + r and holds layers
// [s * Lv, (s + 1) * Lv), Lv = L / (pp * vpp) (Megatron's interleaving).
// Then data parallelism over the chunks and the optimizer over its buffers.
void Trainer::build_chunks() {
  const auto& L = groups_.layout;
  const auto& p = args_.parallel;
  const int P = L.pp, V = L.vpp;
  const int64_t Lv = args_.model.num_layers / (static_cast<int64_t>(P) * V);
  for (int c = 0; c < V; ++c) {
    const int s = c * P + pp_rank_;
    model::StageConfig st;
    st.first_layer = s * Lv;
    st.num_local_layers = Lv;
    st.pre_process = s == 0;
    st.post_process = s == P * V - 1;
    st.tp = groups_.tp.get();  // the tp size and rank come from the group
    st.sequence_parallel = p.sequence_parallel;
    st.cp = L.cp > 1 ? groups_.cp.get() : nullptr;
    st.cp_comm_type = model::cp_comm_types_from_flag(p.cp_comm_type, args_.model.num_layers);
    st.ep = groups_.ep.get();  // null at --expert-model-parallel-size 1
    st.expert_tensor_parallel = L.etp > 1;  // the experts split over the tp group (etp = tp)
    st.param_buffer_pad = p.ddp.use_distributed_optimizer ? L.dp * L.cp : 1;
    st.compute_dtype = args_.precision.compute_dtype;
    // ZeRO-2/-3 keep no whole gradient buffer (NOTE [Sharded gradients]):
    // start-up holds no more than the whole values next to the shards.
    st.flat_grads = !p.ddp.shards_grads();
    // ZeRO-3: no whole value buffers either; the DDP initializes the shards
    // (NOTE [Sharded init]), so start-up never holds the model whole.
    st.flat_values = !p.ddp.shards_params();
    st.recompute = p.recompute;
    auto m = std::make_unique<model::GptModel>(args_.model, st, be_);
    if (st.flat_values) m->params().init(args_.seed, m->config().init_method_std, m->config().num_layers);
    models_.push_back(std::move(m));
  }
  std::vector<model::GptModel*> models;
  for (auto& m : models_) models.push_back(m.get());
  // Gradients are reduced (and the distributed optimizer sharded) over dp x cp.
  const parallel::ProcessGroups dp_groups = parallel::data_parallel_view(groups_);
  ddp_ = std::make_unique<distributed::DistributedDataParallel>(models, dp_groups, be_, p.ddp);
  if (p.ddp.shards_params())
    ddp_->init_params_sharded(args_.seed, models_[0]->config().init_method_std, models_[0]->config().num_layers);
  // ZeRO-2/-3: the model asks for each layer's parameters through this seam.
  for (int c = 0; c < V; ++c) models_[static_cast<size_t>(c)]->set_param_gatherer(ddp_->param_gatherer(c));
  optimizer_ = std::make_unique<distributed::DistributedOptimizer>(*ddp_, dp_groups, be_, args_.optimizer.adam);
  if (args_.model.fp8.param_gather)  // the FP8 linears read their weights from the FP8 all-gather
    for (int c = 0; c < V; ++c)
      if (model::Fp8State* f = models_[static_cast<size_t>(c)]->fp8_state())
        if (auto g = distributed::make_fp8_param_gather(ddp_->buffer(c), be_, *f, groups_.tp.get()))
          fp8_gathers_.push_back(std::move(g));
}

parallel::ScheduleConfig Trainer::schedule_config(bool forward_only) const {
  parallel::ScheduleConfig sc;
  sc.pp_size = groups_.layout.pp;
  sc.pp_rank = pp_rank_;
  sc.num_microbatches = static_cast<int>(num_microbatches_);
  sc.num_chunks = groups_.layout.vpp;
  sc.forward_only = forward_only;
  return sc;
}

BatchSource Trainer::batches(const data::TokenDataset& dataset, int64_t first_sample) const {
  return BatchSource(dataset, first_sample, dp_rank_, groups_.layout.dp, args_.batch.micro_batch_size,
                     model::CpChunks{groups_.layout.cp, cp_rank_, args_.model.seq_length});
}

double Trainer::evaluate() {
  TRIPOD_CHECK_HINT(data_.valid != nullptr, "give the validation split a share in --split (e.g. 949,50,1)",
                    "evaluation requested but the validation split is empty");
  for (auto& g : fp8_gathers_) g->gather_from_values();  // --fp8-param-gather: the stepped weights
  double total = 0;
  int64_t tokens = 0;
  // Megatron walks the validation set from its start at each evaluation.
  for (int64_t it = 0; it < args_.logging.eval_iters; ++it) {
    stage_->begin(false, 0.f, 0, batches(*data_.valid, it * args_.batch.global_batch_size));
    parallel::run_pipeline_schedule(*stage_, *groups_.pp, schedule_config(true));
    total += stage_->loss_sum();
    tokens += stage_->loss_tokens();
  }
  return reduce_loss(total) / static_cast<double>(std::max<int64_t>(tokens, 1) * groups_.layout.dp * groups_.layout.cp);
}

// See NOTE [Exit signal] in train/exit_signal.h: the signal number, max-reduced over the world.
int Trainer::exit_requested() {
  return all_reduce_scalar<int32_t>(groups_.world.get(), be_, exit_signal_received(), comm::ReduceOp::Max);
}

bool Trainer::is_logger() const {
  // Megatron prints from the last rank: the last pipeline stage holds the loss.
  return groups_.global_rank == groups_.world->size() - 1;
}

void Trainer::log_startup() {
  const auto& cfg = model().config();
  if (is_logger()) {
    log::info("{}", cfg.describe());
    // The padded vocabulary sets the loss head's rows (padded logits take
    // part in the softmax) and depends on TP: layouts compare at one size.
    log::info("vocabulary: {} tokens padded to {} (a multiple of --make-vocab-size-divisible-by {} x TP {}); runs "
              "match across layouts when their padded sizes match", cfg.vocab_size, model().padded_vocab(),
              cfg.make_vocab_size_divisible_by, groups_.layout.tp);
    if (cfg.fp8.enabled()) log::info("FP8 GEMMs in the transformer layers: {}", cfg.fp8.describe());
    if (const std::string note = be_.fp8_gemm_note(); cfg.fp8.enabled() && !note.empty())
      log::warn("--fp8-format on {}: {}; drop --fp8-format on this GPU for speed", be_.name(), note);
    if (const std::string unused = cfg.fp8.unused_settings(); !unused.empty())
      log::warn("{} given without --fp8-format: no effect, the run has no FP8 GEMMs (add "
                "--fp8-format hybrid to train in FP8)", unused);
    log::info("layout: {}{}{} on {}; micro-batch {}, global batch {} ({} micro-batches per data-parallel rank)",
              groups_.layout.str(), model().sequence_parallel() ? ", sequence parallel" : "",
              sharding_note(args_.parallel.ddp), be_.name(),
              args_.batch.micro_batch_size,
              args_.batch.global_batch_size, num_microbatches_);
    const std::string sizes = ddp_->describe_buckets();
    const int64_t bs = ddp_->bucket_size();
    log::info("data-parallel gradient buckets (dp {}, elements in launch order, last layers first): {}; bucket "
              "size {}{}; overlap grad reduce {}, overlap param gather {}; reduced in {}",
              groups_.layout.cp > 1 ? fmt::format("{} x cp {}", groups_.layout.dp, groups_.layout.cp)
                                    : std::to_string(groups_.layout.dp),
              sizes,
              bs > 0                                ? std::to_string(bs)
              : args_.parallel.ddp.shards_grads() ? "per parameter group (ZeRO-2/3: the embedding, each layer, the head)"
                                                    : "unlimited (one bucket per chunk)",
              args_.parallel.ddp.bucket_size > 0 && !ddp_->overlap_grad_reduce() && !args_.parallel.ddp.shards_grads()
                  ? " (--ddp-bucket-size applies with --overlap-grad-reduce only, as in Megatron)"
                  : "",
              ddp_->overlap_grad_reduce() ? "on" : "off", ddp_->overlap_param_gather() ? "on" : "off",
              args_.parallel.ddp.grad_comm_dtype == DType::BF16 ? "bf16 (accumulated in fp32)" : "fp32");
  }
}

// Megatron's training_log: the log line, the JSONL record and the
// TensorBoard scalars of the interval that ends at this iteration.
void Trainer::training_log(const StepResult& last, double loss_sum, int64_t skipped) {
  be_.synchronize();
  const auto& cfg = model().config();
  double peak = args_.logging.peak_tflops;
  if (peak == 0 && be_.device().type == DeviceType::CUDA) peak = 989.0;  // H100/H200 dense bf16
  const int64_t n = time_split_.iterations();
  const double secs = time_split_.seconds_per_iteration();
  IterationMetrics m;
  m.train_iters = args_.batch.train_iters;
  m.global_batch_size = args_.batch.global_batch_size;
  m.iteration = iteration_;
  m.consumed_samples = consumed_samples_;
  // As Megatron, skipped (fp16 overflow) iterations stay out of the loss average.
  m.lm_loss = n > skipped ? loss_sum / static_cast<double>(n - skipped) : last.lm_loss;
  m.lr = last.lr;
  m.grad_norm = last.grad_norm;
  m.loss_scale = scaler_ ? scaler_->scale() : 1.0;
  m.skipped_iters = skipped;
  m.elapsed_ms = secs * 1e3;
  m.tokens_per_sec = static_cast<double>(args_.batch.global_batch_size * cfg.seq_length) / secs;
  m.tflops_per_gpu = m.tokens_per_sec * cfg.flops_per_token() / 1e12 / groups_.world->size();
  m.mfu = peak > 0 ? std::optional<double>(m.tflops_per_gpu / peak) : std::nullopt;
  m.mem_peak_bytes = be_.peak_memory_bytes();
  if (groups_.layout.pp > 1) {
    m.pp_bubble = time_split_.pp_bubble();
    m.pp_bubble_theory = parallel::theoretical_bubble_fraction(schedule_config(false));
  }
  m.time = time_split_.split(m.elapsed_ms);
  if (last.moe)
    m.moe = IterationMetrics::Moe{last.moe->load_balancing_loss, last.moe->z_loss, last.moe->min_tokens_per_expert,
                                  last.moe->max_tokens_per_expert};
  if (is_logger()) log::info("{}", format_log_line(m));
  metrics_->write_train(m);
  tensorboard_->write_train(m);
  time_split_.reset();
}

// Megatron's --profile: the capture range over 0-based iterations
// [--profile-step-start, --profile-step-end), i.e. iterations start+1 to end
// as the log counts them, on the --profile-ranks.
std::string Trainer::profile_window() const {
  const int64_t first = args_.logging.profile_step_start + 1, last = args_.logging.profile_step_end;
  return first == last ? fmt::format("iteration {}", first) : fmt::format("iterations {}-{}", first, last);
}

void Trainer::profile_range(bool open) {
  be_.synchronize();  // the range holds exactly these iterations' kernels
  if (!open) {
    if (!profile_open_) return;
    be_.profiler_stop();
    profile_open_ = false;
    log::info("--profile: capture range closed after iteration {}", iteration_);
    return;
  }
  if ((profile_open_ = be_.profiler_start()))
    log::info("--profile: capture range open for {} on rank {} (the CUDA profiler API: run under "
              "`nsys profile -c cudaProfilerApi`)",
              profile_window(), groups_.global_rank);
  else
    log::warn("--profile: the {} backend has no profiler capture range; {} run as usual (profile the CPU with "
              "perf, or read the time/* split in the log)",
              be_.name(), profile_window());
}

void Trainer::run() {
  const bool logger = is_logger();
  log_startup();
  if (!args_.checkpoint.load.empty()) {
    load_checkpoint();  // ZeRO-3: straight into each rank's shard (NOTE [Streamed shard load])
    if (!args_.parallel.ddp.shards_params())
      for (auto& m : models_) m->params().sync_compute();  // compute copies of the loaded weights
  }
  const int64_t start_iteration = iteration_;
  if (!args_.checkpoint.load.empty() && start_iteration >= args_.batch.train_iters && logger)
    log::info("nothing to train: the checkpoint loaded from {} is at iteration {} and --train-iters is {}; pass a "
              "larger --train-iters to train on (or --finetune to start again at iteration 0)",
              args_.checkpoint.load.empty() ? std::string("--load") : args_.checkpoint.load, start_iteration,
              args_.batch.train_iters);
  double loss_sum = 0;  // over the log interval's iterations that stepped
  int64_t skipped = 0;
  time_split_.reset();
  while (iteration_ < args_.batch.train_iters) {
    inject_rank_fault(groups_.global_rank, iteration_ + 1);  // TRIPOD_FAULT (tests/faults)
    if (profiling_ && iteration_ == args_.logging.profile_step_start) profile_range(true);
    StepResult r = train_step();
    if (!r.skipped) loss_sum += r.lm_loss;
    skipped += r.skipped ? 1 : 0;
    if (iteration_ == start_iteration + 1) log_memory(r);
    if (iteration_ % args_.logging.log_interval == 0 || iteration_ == args_.batch.train_iters) {
      training_log(r, loss_sum, skipped);
      loss_sum = 0;
      skipped = 0;
    }
    if (profiling_ && iteration_ == args_.logging.profile_step_end) profile_range(false);
    if (args_.logging.eval_interval > 0 && args_.logging.eval_iters > 0 && data_.valid &&
        (iteration_ % args_.logging.eval_interval == 0 || iteration_ == args_.batch.train_iters)) {
      const double v = evaluate();
      if (logger)
        log::info(" validation loss at iteration {} | lm loss value: {:.6E} | lm loss PPL: {:.6E}", iteration_, v,
                  std::exp(std::min(v, 20.0)));
      metrics_->write_eval(iteration_, v);
      tensorboard_->write_eval(iteration_, v);
      time_split_.restart_clock();  // evaluation is not iteration time
    }
    const bool interval = args_.checkpoint.save_interval > 0 && iteration_ % args_.checkpoint.save_interval == 0;
    if (!args_.checkpoint.save.empty() && (interval || iteration_ == args_.batch.train_iters)) {
      save_checkpoint();
      time_split_.restart_clock();
    }
    if (const int sig = exit_requested()) {
      stop_signal_ = sig;
      const bool saved_now = !args_.checkpoint.save.empty() && !interval && iteration_ != args_.batch.train_iters;
      if (saved_now) save_checkpoint();
      if (logger)
        log::info("exiting after iteration {}: {} received{}; {}", iteration_, signal_name(sig),
                  args_.checkpoint.exit_signal_handler ? " (--exit-signal-handler)" : "",
                  args_.checkpoint.save.empty()
                      ? std::string("no --save, so no checkpoint was written")
                      : fmt::format("checkpoint {} in {}", ckpt::iter_dir_name(iteration_), args_.checkpoint.save));
      break;
    }
    const int64_t exit_every = args_.checkpoint.exit_interval;
    if (exit_every > 0 && iteration_ % exit_every == 0 && iteration_ != args_.batch.train_iters) {
      if (!args_.checkpoint.save.empty() && !interval) save_checkpoint();
      if (logger) log::info("exiting after iteration {} (--exit-interval {})", iteration_, exit_every);
      break;
    }
  }
  ddp_->finish_param_sync();  // nothing in flight into the buffers after run()
}

}  // namespace tripod::train
