// `tripod train`: Megatron's pretrain_gpt.py flags -> train::TrainArgs ->
// train::Trainer. Flags only; the loop lives in train/.
#include <CLI/CLI.hpp>

#include <csignal>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "ckpt/sharded_checkpoint.h"
#include "cli/command.h"
#include "cli/default_device.h"
#include "cli/megatron_flags.h"
#include "cli/model_flags.h"
#include "cli/device.h"
#include "cli/oom_advice.h"
#include "data/tokenizer.h"
#include "comm/context.h"
#include "comm/rendezvous.h"
#include "parallel/groups.h"
#include "train/args_agreement.h"
#include "train/trainer.h"

namespace tripod::cli {
namespace {

// The vocabulary size from the tokenizer flags (Megatron builds the
// tokenizer to learn it): loading the tokenizer also validates the files, so
// a wrong vocab or merges file fails here, before any compute.
int64_t vocab_size_from_tokenizer(const data::TokenizerConfig& tc) {
  if (tc.type.empty() && tc.vocab_file.empty() && tc.tokenizer_model.empty()) return 0;
  data::TokenizerConfig c = tc;
  if (c.type.empty()) c.type = data::default_tokenizer_type(c.tokenizer_model);
  if (c.type == "NullTokenizer") return 0;
  auto tok = data::make_tokenizer(c);
  log::info("tokenizer: {}", tok->describe());
  return tok->vocab_size();
}

// Megatron flags that fill other TrainArgs fields after parsing.
struct DerivedFlags {
  double lr_warmup_fraction = -1;
  double exit_duration_in_mins = 0;
};

void add_train_flags(CLI::App& app, train::TrainArgs& a, data::TokenizerConfig& tok, DerivedFlags& derived) {
  double& warmup_fraction = derived.lr_warmup_fraction;
  // As argparse in Megatron: a repeated flag takes its last value, so a
  // launch script can override a default set earlier on the line.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto& m = a.model;
  app.add_option("--num-layers", m.num_layers, "transformer layers")->capture_default_str();
  app.add_option("--hidden-size", m.hidden_size, "model width")->capture_default_str();
  app.add_option("--num-attention-heads", m.num_attention_heads)->capture_default_str();
  app.add_option("--ffn-hidden-size", m.ffn_hidden_size, "MLP width (default 4 x hidden)");
  app.add_option("--seq-length", m.seq_length)->capture_default_str();
  app.add_option("--max-position-embeddings", m.max_position_embeddings, "default: --seq-length");
  app.add_option("--vocab-size", m.vocab_size, "vocabulary size (mock data; else from the tokenizer)");
  app.add_option("--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by)->capture_default_str();
  app.add_option("--init-method-std", m.init_method_std)->capture_default_str();
  app.add_option("--hidden-dropout", m.hidden_dropout)->capture_default_str();
  app.add_option("--attention-dropout", m.attention_dropout)->capture_default_str();
  app.add_option("--micro-batch-size", a.micro_batch_size)->capture_default_str();
  app.add_option("--global-batch-size", a.global_batch_size, "default: micro batch x data-parallel size");
  app.add_option("--train-iters", a.train_iters)->required();
  app.add_option("--lr", a.lr)->capture_default_str();
  app.add_option("--min-lr", a.min_lr)->capture_default_str();
  app.add_option("--lr-decay-style", a.lr_decay_style, "constant | linear | cosine")->capture_default_str();
  app.add_option("--lr-decay-iters", a.lr_decay_iters, "default: --train-iters");
  app.add_option("--lr-warmup-iters", a.lr_warmup_iters)->capture_default_str();
  app.add_option("--lr-warmup-fraction", warmup_fraction,
                 "warmup as a fraction of the decay iterations (instead of --lr-warmup-iters)");
  app.add_option("--weight-decay", a.weight_decay)->capture_default_str();
  app.add_option("--clip-grad", a.clip_grad, "global grad-norm clip (0: off)")->capture_default_str();
  app.add_option("--adam-beta1", a.adam_beta1)->capture_default_str();
  app.add_option("--adam-beta2", a.adam_beta2)->capture_default_str();
  app.add_option("--adam-eps", a.adam_eps)->capture_default_str();
  app.add_option("--seed", a.seed)->capture_default_str();
  app.add_flag("--mock-data", a.mock_data, "synthetic learnable tokens (needs --vocab-size)");
  app.add_option("--data-path", a.data_path, "PREFIX, or W1 PREFIX1 W2 PREFIX2 ... (Megatron .bin/.idx)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--split", a.split, "train,valid,test document shares")->capture_default_str();
  app.add_option("--tokenizer-type", tok.type, "GPT2BPETokenizer | SentencePieceTokenizer | HuggingFaceTokenizer | NullTokenizer");
  app.add_option("--vocab-file", tok.vocab_file, "GPT-2 vocab JSON (sets the vocab size)");
  app.add_option("--merge-file", tok.merge_file, "GPT-2 merges file");
  app.add_option("--tokenizer-model", tok.tokenizer_model, "SentencePiece .model or Hugging Face tokenizer.json (sets the vocab size)");
  app.add_option("--eval-interval", a.eval_interval)->capture_default_str();
  app.add_option("--eval-iters", a.eval_iters)->capture_default_str();
  app.add_option("--log-interval", a.log_interval)->capture_default_str();
  app.add_option("--metrics-file", a.metrics_file, "append one JSON object per logged iteration");
  app.add_option("--tensorboard-dir", a.tensorboard_dir,
                 "write a TensorBoard event file into DIR (scalars every --log-interval and at each evaluation)");
  app.add_option("--tensor-model-parallel-size", a.tp)->capture_default_str();
  app.add_option("--pipeline-model-parallel-size", a.pp)->capture_default_str();
  app.add_option("--num-layers-per-virtual-pipeline-stage", a.num_layers_per_virtual_stage,
                 "interleaved 1F1B: layers per virtual stage");
  app.add_option("--virtual-pipeline-model-parallel-size", a.virtual_pipeline_size,
                 "interleaved 1F1B: virtual stages per pipeline rank");
  app.add_flag("--sequence-parallel", a.sequence_parallel);
  app.add_flag("--use-distributed-optimizer", a.use_distributed_optimizer);
  app.add_option("--ddp-bucket-size", a.ddp_bucket_size,
                 "elements per data-parallel gradient bucket (default max(4e7, 1e6 x dp); with "
                 "--overlap-grad-reduce only, else one bucket)");
  app.add_flag("--overlap-grad-reduce", a.overlap_grad_reduce,
               "start each bucket's dp reduction in the last micro-batch's backward, as soon as its grads are final");
  app.add_flag("--overlap-param-gather", a.overlap_param_gather,
               "distributed optimizer: all-gather updated params per bucket asynchronously, waited for by the "
               "next forward");
  app.add_option("--device", a.device, "cpu | cuda (default: cuda when a GPU is visible and the build has CUDA)");
  app.add_flag("--bf16", a.bf16, "bf16 compute, fp32 master weights (cuda)");
  app.add_flag("--deterministic-mode", a.deterministic_mode,
               "bitwise-repeatable kernels where the backend has a choice (cuda: cuDNN attention's deterministic dQ)");
  app.add_flag("--fp16", a.fp16, "fp16 compute with loss scaling (cuda)");
  app.add_option("--loss-scale", a.loss_scale, "fp16: static loss scale (default: dynamic)");
  app.add_option("--initial-loss-scale", a.initial_loss_scale, "fp16: first dynamic loss scale")->capture_default_str();
  app.add_option("--min-loss-scale", a.min_loss_scale, "fp16: lowest dynamic loss scale")->capture_default_str();
  app.add_option("--loss-scale-window", a.loss_scale_window, "fp16: clean iterations before the scale doubles")
      ->capture_default_str();
  app.add_option("--hysteresis", a.hysteresis, "fp16: overflows tolerated before the scale halves")
      ->capture_default_str();
  app.add_flag("--recompute-activations", a.recompute_activations,
               "selective recompute: the attention core is recomputed in backward");
  app.add_option("--recompute-granularity", a.recompute_granularity,
                 "full (rerun each layer's forward in backward) | selective");
  app.add_option("--peak-tflops", a.peak_tflops, "peak TFLOP/s for MFU (default: 989 on cuda, none on cpu)");
  app.add_option("--distributed-timeout-minutes", a.distributed_timeout_minutes,
                 "timeout of every collective and store wait")->capture_default_str();
  app.add_option("--save", a.save, "checkpoint directory");
  app.add_option("--load", a.load, "checkpoint directory to resume from (any layout)");
  app.add_option("--save-interval", a.save_interval, "save every N iterations (and at the end)");
  app.add_option("--save-retain", a.save_retain, "keep only the last K checkpoints (0: all)");
  app.add_flag("--finetune", a.finetune, "load weights only; start at iteration 0 with a fresh optimizer");
  app.add_flag("--no-load-optim", a.no_load_optim, "do not load the optimizer state");
  app.add_flag("--no-load-rng", a.no_load_rng, "do not load the RNG state");
  app.add_option("--ckpt-step", a.ckpt_step, "with --load: resume from iteration N instead of the latest");
  app.add_flag("--exit-signal-handler", a.exit_signal_handler,
               "on SIGTERM, save at the next iteration boundary and exit 0");
  app.add_option("--exit-interval", a.exit_interval, "save (with --save) and exit 0 at a multiple of N iterations");
  app.add_option("--exit-duration-in-mins", derived.exit_duration_in_mins,
                 "save (with --save) and exit 0 at the first iteration boundary after M minutes");
}

int run_train(int argc, char** argv) {
  CLI::App app{"Train a GPT model (Megatron-LM flag names).\n"
               "Example: tripod train --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
               "--seq-length 32 --mock-data --vocab-size 512 --micro-batch-size 4 --train-iters 50 --lr 1e-3"};
  app.get_formatter()->column_width(44);
  train::TrainArgs args;
  std::string dump_weights, dist_backend;
  data::TokenizerConfig tok;
  DerivedFlags derived;
  add_train_flags(app, args, tok, derived);
  app.add_option("--distributed-backend", dist_backend,
                 "nccl (default on cuda) | gloo (cpu default; on cuda: device buffers staged through host "
                 "memory, ranks may share a GPU to rehearse a layout)");
  ModelFlags model_flags;
  model_flags.add_to(app, args.model);
  MegatronCompat compat;
  compat.add_to(app);
  bool parse_only = false;
  app.add_flag("--parse-only", parse_only, "parse the flags, report, and exit")->group("");  // testing aid
  app.add_option("--dump-weights", dump_weights,
                 "after training, write each rank's parameter shards to DIR/rank<N>.bin (parity checks)")
      ->group("");  // hidden: a testing aid
  app.add_option("--inject-grad-overflow-at", args.inject_grad_overflow_at,
                 "make the gradients of iteration N non-finite (checks the fp16 skip and the NaN stop)")
      ->group("");  // hidden: a testing aid
  std::string config_file;
  app.add_option("--config", config_file,
                 "flag file: flags one or more per line, ${ENV} and ${ENV:-default} substituted; "
                 "later command-line flags override it");
  // --config FILE is expanded in place before parsing (base/config.h).
  std::vector<std::string> words = config::expand_config_args(argc, argv);
  std::vector<char*> expanded;
  for (auto& w : words) expanded.push_back(w.data());
  try {
    app.parse(static_cast<int>(expanded.size()), expanded.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  compat.apply(app, comm::resolve_rank_info().rank == 0);
  model_flags.apply(app, args.model);
  if (derived.lr_warmup_fraction >= 0) {
    // Megatron: warmup = fraction x decay steps; here in whole iterations.
    TRIPOD_CHECK_HINT(app.count("--lr-warmup-iters") == 0 || args.lr_warmup_iters == 0,
                      "pass one of them", "--lr-warmup-fraction and --lr-warmup-iters are both given");
    TRIPOD_CHECK(derived.lr_warmup_fraction <= 1, "--lr-warmup-fraction {} is above 1",
                 derived.lr_warmup_fraction);
    const int64_t decay = args.lr_decay_iters > 0 ? args.lr_decay_iters : args.train_iters;
    args.lr_warmup_iters = static_cast<int64_t>(derived.lr_warmup_fraction * static_cast<double>(decay));
  }
  if (parse_only) {
    log::info("flags parsed (lr warmup {} iterations)", args.lr_warmup_iters);
    return 0;
  }
  if (derived.exit_duration_in_mins > 0) {
    // The --exit-signal-handler path: every rank agrees at the next iteration
    // boundary, saves (with --save) and exits 0.
    args.exit_signal_handler = true;
    const auto after = std::chrono::duration<double, std::ratio<60>>(derived.exit_duration_in_mins);
    std::thread([after] {
      std::this_thread::sleep_for(after);
      log::info("--exit-duration-in-mins reached: stopping at the next iteration boundary");
      std::raise(SIGTERM);
    }).detach();
  }
  if (args.model.vocab_size == 0) args.model.vocab_size = vocab_size_from_tokenizer(tok);
  if (args.exit_signal_handler) train::install_exit_signal_handler();
  args.tokenizer_type = tok.type;
  args.vocab_file = tok.vocab_file;
  args.merge_file = tok.merge_file;
  args.tokenizer_model = tok.tokenizer_model;
  // Rank and world size from torchrun / Slurm / Open MPI / tripod launch.
  const comm::RankInfo info = comm::resolve_rank_info();
  if (app.count("--device") == 0) {
    const DeviceChoice d = default_device();
    args.device = d.device;
    if (info.rank == 0) {
      log::info("device: {} ({}; --device overrides)", d.device, d.reason);
      if (d.gpu_without_cuda_build)
        log::warn("this node has an NVIDIA GPU but this tripod was built without CUDA, so it trains on "
                  "the CPU; rebuild with -DTRIPOD_CUDA=ON to use the GPU");
    }
  }
  // One job script both starts and resumes a run (Megatron's behaviour):
  // --load naming a directory without a checkpoint yet is a fresh start.
  // A damaged checkpoint still stops the run (ckpt::load_dir_has_checkpoint).
  TRIPOD_CHECK_HINT(args.ckpt_step < 0 || !args.load.empty(), "pass --load DIR with --ckpt-step",
                    "--ckpt-step {} names an iteration to load, but there is no --load", args.ckpt_step);
  if (!args.load.empty()) {
    std::string why;
    if (args.ckpt_step < 0 && !ckpt::load_dir_has_checkpoint(args.load, &why)) {
      if (info.rank == 0)
        log::warn("--load {}: no checkpoint to resume from ({}); starting from scratch", args.load, why);
      args.load.clear();
    }
  }
  backend::configure_cpu_threads(info.local_world_size);
  const comm::CommBackend comm_backend = comm_backend_for(args.device, dist_backend);
  auto be = make_backend(args.device, info, comm_backend);
  be->set_deterministic(args.deterministic_mode);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(args.distributed_timeout_minutes * 60000));
  auto ctx = comm::DistContext::init(info, be->device().type, timeout, comm_backend);
  // Every rank started with the same model, layout, batch, optimizer and data
  // flags, or every rank stops naming the first difference (NOTE [Args agreement]).
  if (auto store = ctx->store()) train::check_args_agree(*store, ctx->rank(), ctx->world_size(), args, timeout);
  // NCCL collectives (and the host staging of Gloo ones) queue after the
  // model's kernels instead of waiting for the whole device.
  ctx->set_device_stream(be->native_stream());
  // The layout records the interleaving so start-up prints the real "(vpp N)".
  const int vpp = train::virtual_pipeline_size(args);
  const auto layout = parallel::Layout::make(ctx->world_size(), args.tp, args.pp, vpp);
  const auto groups = parallel::make_process_groups(*ctx, layout);
  try {
    train::Trainer trainer(args, *be, &groups);
    trainer.run();
    if (!dump_weights.empty()) trainer.dump_weights(dump_weights);
  } catch (const OutOfMemoryError& e) {
    ctx->abort();
    const int g = groups.global_rank;
    const JobShape job{g, ctx->world_size(), info.local_world_size, layout.tp_rank(g), layout.pp_rank(g),
                       layout.dp_rank(g)};
    throw Error(oom_advice(e, args, job), e.hint());
  } catch (...) {
    ctx->abort();  // peers blocked in a collective with this rank end now, not at the timeout
    throw;
  }
  return 0;
}

}  // namespace

TRIPOD_REGISTER_COMMAND(train, "train", "train a GPT model (Megatron flags; CPU or CUDA)", run_train);

}  // namespace tripod::cli
