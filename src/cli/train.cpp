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
#include "cli/plan_job.h"
#include "cli/train_flags.h"
#include "data/tokenizer.h"
#include "comm/context.h"
#include "comm/rendezvous.h"
#include "parallel/groups.h"
#include "train/args_agreement.h"
#include "train/trainer.h"

namespace tripod::cli {
namespace {

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
    const plan::JobShape where{g, layout.tp_rank(g), layout.pp_rank(g), layout.dp_rank(g)};
    throw Error(plan::oom_advice(e, plan_job(args, layout, info.local_world_size), where), e.hint());
  } catch (...) {
    ctx->abort();  // peers blocked in a collective with this rank end now, not at the timeout
    throw;
  }
  return 0;
}

}  // namespace

TRIPOD_REGISTER_COMMAND(train, "train", "train a GPT model (Megatron flags; CPU or CUDA)", run_train);

}  // namespace tripod::cli
