// Implementation of train/trainer.h (single process: TP = PP = DP = 1).
#include "train/trainer.h"

#include <atomic>
#include <cmath>
#include <csignal>

#include "backend/philox.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timer.h"

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
  TRIPOD_CHECK_HINT(a.log_interval > 0, "use --log-interval >= 1", "--log-interval is {}", a.log_interval);
  TRIPOD_CHECK_HINT(!(a.bf16 && a.fp16), "pass only one of --bf16 and --fp16",
                    "--bf16 and --fp16 are mutually exclusive");
  TRIPOD_CHECK_HINT(a.device == "cuda" || (!a.bf16 && !a.fp16), "drop --bf16/--fp16, or run with --device cuda",
                    "the CPU backend computes in fp32 only");
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

void Trainer::setup(data::DatasetSplits* given) {
  const int world = groups_.world ? groups_.world->size() : 1;
  dp_size_ = world / (args_.tp * args_.pp);
  if (args_.global_batch_size == 0) args_.global_batch_size = args_.micro_batch_size * std::max(dp_size_, 1);
  validate_args(args_, world);
  const auto& L = groups_.layout;
  TRIPOD_CHECK(!groups_.world || (L.tp == args_.tp && L.pp == args_.pp), "process groups built for {} but the "
               "flags ask for tp {} pp {}", L.str(), args_.tp, args_.pp);
  TRIPOD_CHECK_HINT(args_.pp == 1, "drop --pipeline-model-parallel-size for now",
                    "pipeline parallelism is not wired into the trainer in this build yet");
  TRIPOD_CHECK_HINT(!args_.use_distributed_optimizer, "drop --use-distributed-optimizer for now",
                    "the distributed optimizer is not available in this build yet");
  tp_rank_ = groups_.world ? L.tp_rank(groups_.global_rank) : 0;
  dp_rank_ = groups_.world ? L.dp_rank(groups_.global_rank) : 0;
  num_microbatches_ = args_.global_batch_size / (args_.micro_batch_size * dp_size_);

  model::StageConfig stage;
  stage.tp_size = args_.tp;
  stage.tp_rank = tp_rank_;
  stage.tp = groups_.tp.get();
  stage.sequence_parallel = args_.sequence_parallel;
  model_ = std::make_unique<model::GptModel>(args_.model, stage, be_);
  const auto& cfg = model_->config();
  model_->params().init(args_.seed, cfg.init_method_std, cfg.num_layers);

  std::vector<optim::Segment> segs;
  for (const auto& p : model_->params().params())
    segs.push_back({p.offset, shape_numel(p.shape), p.spec.weight_decay});
  segments_ = optim::merge_segments(std::move(segs));
  optim::AdamWConfig oc{args_.adam_beta1, args_.adam_beta2, args_.adam_eps, args_.weight_decay};
  optimizer_ = std::make_unique<optim::AdamW>(be_, model_->params().numel(), oc);

  schedule_.max_lr = args_.lr;
  schedule_.min_lr = args_.min_lr;
  schedule_.warmup_iters = args_.lr_warmup_iters;
  schedule_.decay_iters = args_.lr_decay_iters > 0 ? args_.lr_decay_iters : args_.train_iters;
  schedule_.style = optim::decay_style_from_name(args_.lr_decay_style);
  schedule_.validate();

  data::DataConfig dc;
  dc.mock_data = args_.mock_data;
  dc.vocab_size = cfg.vocab_size;
  dc.padded_vocab_size = model_->padded_vocab();
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
  acts_ = model_->make_acts(args_.micro_batch_size, cfg.seq_length);
}

Trainer::~Trainer() = default;

void Trainer::load_batch(const data::TokenDataset& ds, int64_t first, model::MicroBatchActs& acts) {
  const int64_t B = acts.B, T = acts.T, S = ds.sample_length();
  TRIPOD_CHECK(S == T + 1, "dataset samples have {} tokens, expected --seq-length + 1 = {}", S, T + 1);
  std::vector<int32_t> sample(static_cast<size_t>(S));
  Tensor tokens = Tensor::empty({B, T}, DType::I32), targets = Tensor::empty({B, T}, DType::I32);
  for (int64_t b = 0; b < B; ++b) {
    ds.get((first + b) % ds.num_samples(), sample.data());
    for (int64_t t = 0; t < T; ++t) {
      tokens.data<int32_t>()[b * T + t] = sample[t];
      targets.data<int32_t>()[b * T + t] = sample[t + 1];
    }
  }
  be_.copy(acts.tokens, tokens);
  if (acts.targets.defined()) be_.copy(acts.targets, targets);
  acts.sample_offset = first;
}

static double sum_losses(backend::Backend& be, const Tensor& losses) {
  Tensor h = Tensor::empty({losses.numel()}, DType::F32);
  be.copy(h, losses);
  be.synchronize();
  double s = 0;
  for (int64_t i = 0; i < h.numel(); ++i) s += h.data<float>()[i];
  return s;
}

// Megatron's clip_grad_norm_fp32: every parameter counted once. Sharded
// parameters count on every tp rank; replicated ones on tp rank 0 only
// (param_is_not_tensor_parallel_duplicate); the squares are summed over the
// model-parallel group. Gradients are already averaged over dp.
double Trainer::global_grad_norm() {
  Tensor acc = be_.empty({1}, DType::F32);
  be_.zero(acc);
  if (tp_rank_ == 0 || args_.tp == 1) {
    be_.sum_squares(acc, model_->params().grads());
  } else {
    for (const auto& p : model_->params().params())
      if (p.spec.shard != model::ShardDim::None) be_.sum_squares(acc, p.grad);
  }
  if (groups_.mp && groups_.mp->size() > 1) groups_.mp->all_reduce(acc)->wait();
  Tensor h = Tensor::empty({1}, DType::F32);
  be_.copy(h, acc);
  be_.synchronize();
  return std::sqrt(static_cast<double>(h.data<float>()[0]));
}

// Data-parallel gradient reduction: the loss is already scaled by 1/dp, so
// the SUM over dp is the average gradient (Megatron's DDP, fp32 grads).
void Trainer::reduce_gradients() {
  model_->reduce_sequence_parallel_grads();
  if (groups_.dp && groups_.dp->size() > 1) groups_.dp->all_reduce(model_->params().grads())->wait();
}

double Trainer::reduce_loss(double local_sum) {
  if (!groups_.dp || groups_.dp->size() == 1) return local_sum;
  Tensor h = Tensor::empty({1}, DType::F64);
  h.data<double>()[0] = local_sum;
  Tensor d = be_.empty({1}, DType::F64);  // on the communicator's device
  be_.copy(d, h);
  groups_.dp->all_reduce(d)->wait();
  be_.copy(h, d);
  be_.synchronize();
  return h.data<double>()[0];
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
  Tensor h = Tensor::empty({1}, DType::I32);
  h.data<int32_t>()[0] = g_exit_signal.load();
  if (groups_.world && groups_.world->size() > 1) {
    Tensor d = be_.empty({1}, DType::I32);
    be_.copy(d, h);
    dist::AllReduceOptions o;
    o.op = dist::ReduceOp::Max;
    groups_.world->all_reduce(d, o)->wait();
    be_.copy(h, d);
    be_.synchronize();
  }
  return h.data<int32_t>()[0] != 0;
}

bool Trainer::is_logger() const {
  // Megatron prints from the last rank; with tp/dp that is the last pp stage.
  return !groups_.world || groups_.global_rank == groups_.world->size() - 1;
}

void Trainer::check_finite(double loss, double grad_norm) {
  if (std::isfinite(loss) && std::isfinite(grad_norm)) return;
  // Name the first parameter (in forward order) whose gradient is not finite.
  std::string first_bad = "none (the loss itself is not finite)";
  for (const auto& p : model_->params().params()) {
    Tensor acc = be_.empty({1}, DType::F32);
    be_.zero(acc);
    be_.sum_squares(acc, p.grad);
    Tensor h = Tensor::empty({1}, DType::F32);
    be_.copy(h, acc);
    be_.synchronize();
    if (!std::isfinite(h.data<float>()[0])) {
      first_bad = p.spec.name;
      break;
    }
  }
  TRIPOD_CHECK_HINT(false, "lower --lr, raise --lr-warmup-iters, check --clip-grad, or check the data",
                    "non-finite {} at iteration {}: lm loss {}, grad norm {}; first parameter with a "
                    "non-finite gradient: {}", std::isfinite(loss) ? "grad norm" : "loss", iteration_ + 1,
                    loss, grad_norm, first_bad);
}

StepResult Trainer::train_step() {
  const int64_t B = args_.micro_batch_size, T = model_->config().seq_length;
  const float dloss = 1.f / static_cast<float>(B * T * num_microbatches_ * dp_size_);
  const uint64_t dropout_seed = backend::mix64(args_.seed, static_cast<uint64_t>(iteration_ + 1));
  model_->params().zero_grad();
  double loss_sum = 0;
  for (int64_t m = 0; m < num_microbatches_; ++m) {
    // Megatron's pretraining sampler: micro-batch m of this iteration takes
    // samples consumed + m*B*dp + dp_rank*B + [0, B).
    load_batch(*data_.train, consumed_samples_ + (m * dp_size_ + dp_rank_) * B, acts_);
    model_->forward(acts_, true, dloss, dropout_seed);
    loss_sum += sum_losses(be_, acts_.losses);
    model_->backward(acts_, nullptr, dropout_seed);
  }
  reduce_gradients();
  StepResult r;
  r.lm_loss = reduce_loss(loss_sum) / static_cast<double>(B * T * num_microbatches_ * dp_size_);
  r.grad_norm = global_grad_norm();
  check_finite(r.lm_loss, r.grad_norm);
  r.lr = schedule_.lr_for_iteration(iteration_ + 1);
  const float clip = optim::clip_coefficient(r.grad_norm, args_.clip_grad);
  optimizer_->step(model_->params().values(), model_->params().grads(), segments_, r.lr, clip);
  ++iteration_;
  consumed_samples_ += args_.global_batch_size;
  return r;
}

double Trainer::evaluate() {
  TRIPOD_CHECK_HINT(data_.valid != nullptr, "give the validation split a share in --split (e.g. 949,50,1)",
                    "evaluation requested but the validation split is empty");
  model::MicroBatchActs acts = model_->make_acts(args_.micro_batch_size, model_->config().seq_length);
  const int64_t B = args_.micro_batch_size, T = model_->config().seq_length;
  double total = 0;
  int64_t count = 0;
  // Megatron walks the validation set from the start at each evaluation.
  for (int64_t it = 0; it < args_.eval_iters; ++it)
    for (int64_t m = 0; m < num_microbatches_; ++m) {
      load_batch(*data_.valid, ((it * num_microbatches_ + m) * dp_size_ + dp_rank_) * B, acts);
      model_->forward(acts, false, 0.f, 0);
      total += sum_losses(be_, acts.losses);
      count += B * T;
    }
  return reduce_loss(total) / static_cast<double>(count * dp_size_);
}

void Trainer::run() {
  const auto& cfg = model_->config();
  const bool logger = is_logger();
  if (logger) {
  log::info("{}", cfg.describe());
  log::info("layout: TP={} PP={} DP={}{} on {}; micro-batch {}, global batch {} ({} micro-batches per iteration)",
            args_.tp, args_.pp, dp_size_, model_->sequence_parallel() ? " (sequence parallel)" : "", be_.name(),
            args_.micro_batch_size, args_.global_batch_size, num_microbatches_);
  }
  log::info("memory per rank: parameters {:.1f} MiB, gradients {:.1f} MiB, optimizer state {:.1f} MiB, "
            "activations per micro-batch {:.1f} MiB",
            model_->params().numel() * 4.0 / (1 << 20), model_->params().numel() * 4.0 / (1 << 20),
            model_->params().numel() * 8.0 / (1 << 20), acts_.bytes() / double(1 << 20));
  (void)logger;
  const double flops_per_token = cfg.flops_per_token();
  double peak = args_.peak_tflops;
  if (peak == 0 && be_.device().type == DeviceType::CUDA) peak = 989.0;  // H100/H200 dense bf16
  IterationMetrics m;
  m.train_iters = args_.train_iters;
  m.global_batch_size = args_.global_batch_size;
  double loss_acc = 0;
  int64_t since_log = 0;
  Timer timer;
  if (!args_.load.empty()) load_checkpoint();
  while (iteration_ < args_.train_iters) {
    StepResult r = train_step();
    loss_acc += r.lm_loss;
    ++since_log;
    if (iteration_ % args_.log_interval == 0 || iteration_ == args_.train_iters) {
      be_.synchronize();
      const double secs = timer.seconds() / static_cast<double>(since_log);
      m.iteration = iteration_;
      m.consumed_samples = consumed_samples_;
      m.lm_loss = loss_acc / static_cast<double>(since_log);
      m.lr = r.lr;
      m.grad_norm = r.grad_norm;
      m.elapsed_ms = secs * 1e3;
      m.tokens_per_sec = static_cast<double>(args_.global_batch_size * cfg.seq_length) / secs;
      m.tflops_per_gpu = m.tokens_per_sec * flops_per_token / 1e12;
      m.mfu = peak > 0 ? std::optional<double>(m.tflops_per_gpu / peak) : std::nullopt;
      m.mem_peak_bytes = be_.peak_memory_bytes();
      if (logger) log::info("{}", format_log_line(m));
      metrics_->write_train(m);
      loss_acc = 0;
      since_log = 0;
      timer.reset();
    }
    if (args_.eval_interval > 0 && args_.eval_iters > 0 && data_.valid &&
        (iteration_ % args_.eval_interval == 0 || iteration_ == args_.train_iters)) {
      const double v = evaluate();
      if (logger)
        log::info(" validation loss at iteration {} | lm loss value: {:.6E} | lm loss PPL: {:.6E}", iteration_, v,
                  std::exp(std::min(v, 20.0)));
      metrics_->write_eval(iteration_, v);
      timer.reset();
    }
    const bool interval = args_.save_interval > 0 && iteration_ % args_.save_interval == 0;
    if (!args_.save.empty() && (interval || iteration_ == args_.train_iters)) {
      save_checkpoint();
      timer.reset();
    }
    if (args_.exit_signal_handler && exit_requested()) {
      if (!args_.save.empty() && !interval && iteration_ != args_.train_iters) save_checkpoint();
      if (logger) log::info("exiting after iteration {}: SIGTERM received (--exit-signal-handler)", iteration_);
      return;
    }
  }
}

}  // namespace tripod::train

namespace tripod::train {

std::pair<Tensor, Tensor> Trainer::optimizer_state() {
  return {optimizer_->exp_avg(), optimizer_->exp_avg_sq()};
}

void Trainer::set_optimizer_state(const Tensor& exp_avg, const Tensor& exp_avg_sq, int64_t steps) {
  be_.copy(optimizer_->exp_avg(), exp_avg);
  be_.copy(optimizer_->exp_avg_sq(), exp_avg_sq);
  optimizer_->set_steps(steps);
}

void Trainer::dump_weights(const std::string& dir) {
  const std::string path = fmt::format("{}/rank{}.bin", dir, groups_.world ? groups_.global_rank : 0);
  FILE* f = std::fopen(path.c_str(), "wb");
  TRIPOD_CHECK(f, "cannot write {}", path);
  auto put_i64 = [&](int64_t v) { std::fwrite(&v, 8, 1, f); };
  put_i64(static_cast<int64_t>(model_->params().params().size()));
  for (const auto& p : model_->params().params()) {
    put_i64(static_cast<int64_t>(p.spec.name.size()));
    std::fwrite(p.spec.name.data(), 1, p.spec.name.size(), f);
    put_i64(static_cast<int64_t>(p.spec.shard));
    put_i64(args_.tp);
    put_i64(tp_rank_);
    put_i64(dp_rank_);
    put_i64(static_cast<int64_t>(p.spec.global_shape.size()));
    for (int64_t d : p.spec.global_shape) put_i64(d);
    Tensor h = model_->params().value_to_host(p);
    put_i64(h.numel());
    std::fwrite(h.raw(), 4, static_cast<size_t>(h.numel()), f);
  }
  std::fclose(f);
}

}  // namespace tripod::train
