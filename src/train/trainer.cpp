// Implementation of train/trainer.h: set-up, the loop, evaluation, logging.
// One iteration (train_step, the memory report, the weight dump) is in step.cpp.
#include "train/trainer.h"

#include <atomic>
#include <cmath>
#include <csignal>

#include "backend/philox.h"
#include "base/debug_config.h"
#include "base/fault_injection.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timer.h"
#include "train/scalar_reduce.h"

namespace tripod::train {

void validate_args(const TrainArgs& a, int world_size) {
  TRIPOD_CHECK_HINT(a.train_iters > 0, "pass --train-iters N", "--train-iters is {}", a.train_iters);
  TRIPOD_CHECK_HINT(a.micro_batch_size > 0, "pass --micro-batch-size N (N >= 1)",
                    "--micro-batch-size is {}", a.micro_batch_size);
  const int64_t mp = static_cast<int64_t>(a.tp) * a.pp;
  TRIPOD_CHECK_HINT(a.tp >= 1 && a.pp >= 1 && world_size % mp == 0,
                    "choose sizes whose product divides the number of ranks",
                    "world size {} is not divisible by --tensor-model-parallel-size {} x "
                    "--pipeline-model-parallel-size {}", world_size, a.tp, a.pp);
  const int64_t dp = world_size / mp;
  TRIPOD_CHECK_HINT(a.global_batch_size % (a.micro_batch_size * dp) == 0,
                    fmt::format("use a --global-batch-size that is a multiple of {} (micro batch {} x data-parallel {})",
                                a.micro_batch_size * dp, a.micro_batch_size, dp),
                    "--global-batch-size {} is not divisible by --micro-batch-size {} x data-parallel size {}",
                    a.global_batch_size, a.micro_batch_size, dp);
  TRIPOD_CHECK_HINT(a.model.num_layers % a.pp == 0,
                    "choose a --pipeline-model-parallel-size that divides --num-layers",
                    "--num-layers {} is not divisible by --pipeline-model-parallel-size {}", a.model.num_layers, a.pp);
  TRIPOD_CHECK_HINT(a.log_interval > 0, "use --log-interval >= 1", "--log-interval is {}", a.log_interval);
  TRIPOD_CHECK_HINT(!(a.bf16 && a.fp16), "pass only one of --bf16 and --fp16",
                    "--bf16 and --fp16 are mutually exclusive");
  TRIPOD_CHECK_HINT(a.device == "cuda" || (!a.bf16 && !a.fp16), "drop --bf16/--fp16, or run with --device cuda",
                    "the CPU backend computes in fp32 only");
  TRIPOD_CHECK_HINT(a.recompute_granularity.empty() || a.recompute_granularity == "full" ||
                        a.recompute_granularity == "selective",
                    "use --recompute-granularity full or selective", "unknown --recompute-granularity '{}'",
                    a.recompute_granularity);
  TRIPOD_CHECK_HINT(a.fp16 || a.loss_scale == 0,
                    "loss scaling applies to --fp16 only; drop --loss-scale", "--loss-scale {} without --fp16",
                    a.loss_scale);
  TRIPOD_CHECK_HINT(a.ddp_bucket_size >= 0, "pass --ddp-bucket-size N with N >= 1 elements, or leave it out",
                    "--ddp-bucket-size is {}", a.ddp_bucket_size);
  TRIPOD_CHECK_HINT(!a.overlap_param_gather || a.use_distributed_optimizer,
                    "add --use-distributed-optimizer (the all-gather of updated parameters exists only with it), "
                    "or drop --overlap-param-gather",
                    "--overlap-param-gather needs --use-distributed-optimizer");
  TRIPOD_CHECK_HINT(!a.overlap_param_gather || a.overlap_grad_reduce,
                    "add --overlap-grad-reduce, or drop --overlap-param-gather",
                    "--overlap-param-gather needs --overlap-grad-reduce (as in Megatron)");
  virtual_pipeline_size(a);
}

int virtual_pipeline_size(const TrainArgs& a) {
  int v = a.virtual_pipeline_size > 0 ? a.virtual_pipeline_size : 1;
  if (a.num_layers_per_virtual_stage > 0) {
    const int64_t per_rank = a.model.num_layers / a.pp;
    TRIPOD_CHECK_HINT(per_rank % a.num_layers_per_virtual_stage == 0,
                      "choose --num-layers-per-virtual-pipeline-stage dividing --num-layers / --pipeline-model-parallel-size",
                      "--num-layers {} / --pipeline-model-parallel-size {} = {} layers per rank is not divisible by "
                      "--num-layers-per-virtual-pipeline-stage {}", a.model.num_layers, a.pp, per_rank,
                      a.num_layers_per_virtual_stage);
    v = static_cast<int>(per_rank / a.num_layers_per_virtual_stage);
  }
  TRIPOD_CHECK_HINT(v == 1 || a.pp > 1, "interleaving needs --pipeline-model-parallel-size >= 2",
                    "a virtual pipeline of {} stages per rank needs pipeline parallelism", v);
  TRIPOD_CHECK_HINT(a.model.num_layers % (static_cast<int64_t>(a.pp) * v) == 0,
                    "choose sizes so that --num-layers divides into pp x virtual stages",
                    "--num-layers {} is not divisible by {} pipeline stages x {} virtual stages", a.model.num_layers,
                    a.pp, v);
  return v;
}

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

void Trainer::setup(data::DatasetSplits* given) {
  if (!groups_.world) {  // a single process: size-1 groups
    own_ctx_ = comm::DistContext::init(comm::RankInfo{}, be_.device().type, std::chrono::minutes(10));
    groups_ = parallel::make_process_groups(*own_ctx_, parallel::Layout::make(1, 1, 1, 1));
  }
  // Timing decorators on the groups before models and buckets take them.
  time_split_ = TimeSplitAccumulator(parallel::time_communication(groups_), &be_, debug_config().step_timing);
  const int world = groups_.world->size();
  dp_size_ = world / (args_.tp * args_.pp);
  if (args_.global_batch_size == 0) args_.global_batch_size = args_.micro_batch_size * dp_size_;
  validate_args(args_, world);
  vpp_ = virtual_pipeline_size(args_);
  const auto& L = groups_.layout;
  TRIPOD_CHECK(L.tp == args_.tp && L.pp == args_.pp, "process groups built for {} but the flags ask for tp {} pp {}",
               L.str(), args_.tp, args_.pp);
  tp_rank_ = L.tp_rank(groups_.global_rank);
  dp_rank_ = L.dp_rank(groups_.global_rank);
  pp_rank_ = L.pp_rank(groups_.global_rank);
  num_microbatches_ = args_.global_batch_size / (args_.micro_batch_size * dp_size_);
  parallel::validate_schedule_config(schedule_config(false));
  build_chunks();

  schedule_.max_lr = args_.lr;
  schedule_.min_lr = args_.min_lr;
  schedule_.warmup_iters = args_.lr_warmup_iters;
  schedule_.decay_iters = args_.lr_decay_iters > 0 ? args_.lr_decay_iters : args_.train_iters;
  schedule_.style = optim::decay_style_from_name(args_.lr_decay_style);
  schedule_.validate();

  const auto& cfg = model().config();
  data::DataConfig dc;
  dc.mock_data = args_.mock_data;
  dc.vocab_size = cfg.vocab_size;
  dc.padded_vocab_size = model().padded_vocab();
  dc.data_path = args_.data_path;
  dc.split = args_.split;
  dc.seq_length = cfg.seq_length;
  dc.seed = args_.seed;
  dc.train_samples = args_.train_iters * args_.global_batch_size;
  const int64_t evals = args_.eval_interval > 0 ? args_.train_iters / args_.eval_interval + 1 : 0;
  dc.valid_samples = evals * args_.eval_iters * args_.global_batch_size;
  dc.test_samples = args_.eval_iters * args_.global_batch_size;
  data_ = given ? std::move(*given) : data::build_gpt_datasets(dc);
  TRIPOD_CHECK(data_.train, "no training dataset");
  metrics_ = std::make_unique<MetricsWriter>(is_logger() ? args_.metrics_file : std::string());
  tensorboard_ = std::make_unique<TensorBoardWriter>(is_logger() ? args_.tensorboard_dir : std::string());
  if (args_.fp16) {
    LossScalerConfig lc;
    lc.initial_scale = args_.initial_loss_scale;
    lc.min_scale = args_.min_loss_scale;
    lc.window = args_.loss_scale_window;
    lc.hysteresis = args_.hysteresis;
    lc.static_scale = args_.loss_scale;
    if (lc.static_scale > 0) lc.min_scale = std::min(lc.min_scale, lc.static_scale);
    scaler_ = std::make_unique<LossScaler>(lc);
  }

  std::vector<model::GptModel*> models;
  for (auto& m : models_) models.push_back(m.get());
  stage_ = std::make_unique<GptPipelineStage>(models, args_.micro_batch_size, cfg.seq_length);
  // Data-parallel overlap: the DDP's hooks run during the last micro-batch.
  stage_->set_param_hooks(static_cast<int>(num_microbatches_) - 1, ddp_->grad_ready_hook(), ddp_->param_use_hook());
}

// Chunk c of pp rank r is virtual stage s = c * pp + r and holds layers
// [s * Lv, (s + 1) * Lv), Lv = L / (pp * vpp) (Megatron's interleaving).
// Then data parallelism over the chunks and the optimizer over its buffers.
void Trainer::build_chunks() {
  const int P = args_.pp;
  const int64_t Lv = args_.model.num_layers / (static_cast<int64_t>(P) * vpp_);
  for (int c = 0; c < vpp_; ++c) {
    const int s = c * P + pp_rank_;
    model::StageConfig st;
    st.first_layer = s * Lv;
    st.num_local_layers = Lv;
    st.pre_process = s == 0;
    st.post_process = s == P * vpp_ - 1;
    st.tp_size = args_.tp;
    st.tp_rank = tp_rank_;
    st.tp = groups_.tp.get();
    st.sequence_parallel = args_.sequence_parallel;
    st.param_buffer_pad = args_.use_distributed_optimizer ? dp_size_ : 1;
    st.compute_dtype = args_.bf16 ? DType::BF16 : args_.fp16 ? DType::F16 : DType::F32;
    st.recompute = args_.recompute_granularity == "full" ? model::Recompute::Full
                   : (args_.recompute_activations || args_.recompute_granularity == "selective")
                       ? model::Recompute::Selective
                       : model::Recompute::None;
    auto m = std::make_unique<model::GptModel>(args_.model, st, be_);
    m->params().init(args_.seed, m->config().init_method_std, m->config().num_layers);
    models_.push_back(std::move(m));
  }
  std::vector<model::GptModel*> models;
  for (auto& m : models_) models.push_back(m.get());
  distributed::DistributedDataParallelConfig dc;
  dc.overlap_grad_reduce = args_.overlap_grad_reduce;
  dc.overlap_param_gather = args_.overlap_param_gather;
  dc.use_distributed_optimizer = args_.use_distributed_optimizer;
  dc.bucket_size = args_.ddp_bucket_size;
  ddp_ = std::make_unique<distributed::DistributedDataParallel>(models, groups_, be_, dc);
  optim::AdamWConfig oc{args_.adam_beta1, args_.adam_beta2, args_.adam_eps, args_.weight_decay};
  optimizer_ = std::make_unique<distributed::DistributedOptimizer>(*ddp_, groups_, be_, oc);
}

parallel::ScheduleConfig Trainer::schedule_config(bool forward_only) const {
  parallel::ScheduleConfig sc;
  sc.pp_size = args_.pp;
  sc.pp_rank = pp_rank_;
  sc.num_microbatches = static_cast<int>(num_microbatches_);
  sc.num_chunks = vpp_;
  sc.forward_only = forward_only;
  return sc;
}

BatchSource Trainer::batches(const data::TokenDataset& dataset, int64_t first_sample) const {
  return BatchSource(dataset, first_sample, dp_rank_, dp_size_, args_.micro_batch_size);
}

double Trainer::evaluate() {
  TRIPOD_CHECK_HINT(data_.valid != nullptr, "give the validation split a share in --split (e.g. 949,50,1)",
                    "evaluation requested but the validation split is empty");
  double total = 0;
  int64_t tokens = 0;
  // Megatron walks the validation set from its start at each evaluation.
  for (int64_t it = 0; it < args_.eval_iters; ++it) {
    stage_->begin(false, 0.f, 0, batches(*data_.valid, it * args_.global_batch_size));
    parallel::run_pipeline_schedule(*stage_, *groups_.pp, schedule_config(true));
    total += stage_->loss_sum();
    tokens += stage_->loss_tokens();
  }
  return reduce_loss(total) / static_cast<double>(std::max<int64_t>(tokens, 1) * dp_size_);
}

// NOTE [Exit signal]: ranks may see SIGTERM at different iterations, so the
// flag is max-reduced over the world at every iteration boundary and all
// ranks stop (and save) at the same one, as Megatron's DistributedSignalHandler.
namespace {
std::atomic<int> g_exit_signal{0};
void on_exit_signal(int) { g_exit_signal.store(1); }
}  // namespace

void install_exit_signal_handler() {
  std::signal(SIGTERM, on_exit_signal);
  std::signal(SIGINT, on_exit_signal);
}

bool Trainer::exit_requested() {
  return all_reduce_scalar<int32_t>(groups_.world.get(), be_, g_exit_signal.load(), comm::ReduceOp::Max) != 0;
}

bool Trainer::is_logger() const {
  // Megatron prints from the last rank: the last pipeline stage holds the loss.
  return groups_.global_rank == groups_.world->size() - 1;
}

void Trainer::log_startup() {
  const auto& cfg = model().config();
  if (is_logger()) {
    log::info("{}", cfg.describe());
    log::info("layout: {}{}{} on {}; micro-batch {}, global batch {} ({} micro-batches per data-parallel rank)",
              groups_.layout.str(), model().sequence_parallel() ? ", sequence parallel" : "",
              args_.use_distributed_optimizer ? ", distributed optimizer" : "", be_.name(), args_.micro_batch_size,
              args_.global_batch_size, num_microbatches_);
    const std::string sizes = ddp_->describe_buckets();
    const int64_t bs = ddp_->bucket_size();
    log::info("data-parallel gradient buckets (dp {}, elements in launch order, last layers first): {}; bucket "
              "size {}{}; overlap grad reduce {}, overlap param gather {}",
              dp_size_, sizes, bs > 0 ? std::to_string(bs) : "unlimited (one bucket per chunk)",
              args_.ddp_bucket_size > 0 && !ddp_->overlap_grad_reduce()
                  ? " (--ddp-bucket-size applies with --overlap-grad-reduce only, as in Megatron)"
                  : "",
              ddp_->overlap_grad_reduce() ? "on" : "off", ddp_->overlap_param_gather() ? "on" : "off");
  }
}

// Megatron's training_log: the log line, the JSONL record and the
// TensorBoard scalars of the interval that ends at this iteration.
void Trainer::training_log(const StepResult& last, double loss_sum, int64_t skipped) {
  be_.synchronize();
  const auto& cfg = model().config();
  double peak = args_.peak_tflops;
  if (peak == 0 && be_.device().type == DeviceType::CUDA) peak = 989.0;  // H100/H200 dense bf16
  const int64_t n = time_split_.iterations();
  const double secs = time_split_.seconds_per_iteration();
  IterationMetrics m;
  m.train_iters = args_.train_iters;
  m.global_batch_size = args_.global_batch_size;
  m.iteration = iteration_;
  m.consumed_samples = consumed_samples_;
  // As Megatron, skipped (fp16 overflow) iterations stay out of the loss average.
  m.lm_loss = n > skipped ? loss_sum / static_cast<double>(n - skipped) : last.lm_loss;
  m.lr = last.lr;
  m.grad_norm = last.grad_norm;
  m.loss_scale = scaler_ ? scaler_->scale() : 1.0;
  m.skipped_iters = skipped;
  m.elapsed_ms = secs * 1e3;
  m.tokens_per_sec = static_cast<double>(args_.global_batch_size * cfg.seq_length) / secs;
  m.tflops_per_gpu = m.tokens_per_sec * cfg.flops_per_token() / 1e12 / groups_.world->size();
  m.mfu = peak > 0 ? std::optional<double>(m.tflops_per_gpu / peak) : std::nullopt;
  m.mem_peak_bytes = be_.peak_memory_bytes();
  if (args_.pp > 1) {
    m.pp_bubble = time_split_.pp_bubble();
    m.pp_bubble_theory = parallel::theoretical_bubble_fraction(schedule_config(false));
  }
  m.time = time_split_.split(m.elapsed_ms);
  if (is_logger()) log::info("{}", format_log_line(m));
  metrics_->write_train(m);
  tensorboard_->write_train(m);
  time_split_.reset();
}

void Trainer::run() {
  const bool logger = is_logger();
  log_startup();
  if (!args_.load.empty()) {
    load_checkpoint();
    for (auto& m : models_) m->params().sync_compute();  // compute copies of the loaded weights
  }
  const int64_t start_iteration = iteration_;
  double loss_sum = 0;  // over the log interval's iterations that stepped
  int64_t skipped = 0;
  time_split_.reset();
  while (iteration_ < args_.train_iters) {
    inject_rank_fault(groups_.global_rank, iteration_ + 1);  // TRIPOD_FAULT (tests/faults)
    StepResult r = train_step();
    if (!r.skipped) loss_sum += r.lm_loss;
    skipped += r.skipped ? 1 : 0;
    if (iteration_ == start_iteration + 1) log_memory(r);
    if (iteration_ % args_.log_interval == 0 || iteration_ == args_.train_iters) {
      training_log(r, loss_sum, skipped);
      loss_sum = 0;
      skipped = 0;
    }
    if (args_.eval_interval > 0 && args_.eval_iters > 0 && data_.valid &&
        (iteration_ % args_.eval_interval == 0 || iteration_ == args_.train_iters)) {
      const double v = evaluate();
      if (logger)
        log::info(" validation loss at iteration {} | lm loss value: {:.6E} | lm loss PPL: {:.6E}", iteration_, v,
                  std::exp(std::min(v, 20.0)));
      metrics_->write_eval(iteration_, v);
      tensorboard_->write_eval(iteration_, v);
      time_split_.restart_clock();  // evaluation is not iteration time
    }
    const bool interval = args_.save_interval > 0 && iteration_ % args_.save_interval == 0;
    if (!args_.save.empty() && (interval || iteration_ == args_.train_iters)) {
      save_checkpoint();
      time_split_.restart_clock();
    }
    if (args_.exit_signal_handler && exit_requested()) {
      if (!args_.save.empty() && !interval && iteration_ != args_.train_iters) save_checkpoint();
      if (logger) log::info("exiting after iteration {}: SIGTERM received (--exit-signal-handler)", iteration_);
      break;
    }
    if (args_.exit_interval > 0 && iteration_ % args_.exit_interval == 0 && iteration_ != args_.train_iters) {
      if (!args_.save.empty() && !interval) save_checkpoint();
      if (logger) log::info("exiting after iteration {} (--exit-interval {})", iteration_, args_.exit_interval);
      break;
    }
  }
  ddp_->finish_param_sync();  // nothing in flight into the buffers after run()
}

}  // namespace tripod::train
