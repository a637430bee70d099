// Implementation of train/job.h.
#include "train/job.h"

#include <chrono>
#include <csignal>
#include <thread>

#include "base/log.h"
#include "ckpt/sharded_checkpoint.h"
#include "parallel/groups.h"
#include "train/args_agreement.h"
#include "train/trainer.h"

namespace tripod::train {

int64_t vocab_size_from_tokenizer(const data::TokenizerConfig& tc) {
  if (tc.type.empty() && tc.vocab_file.empty() && tc.tokenizer_model.empty()) return 0;
  data::TokenizerConfig c = tc;
  if (c.type.empty()) c.type = data::default_tokenizer_type(c.tokenizer_model);
  if (c.type == "NullTokenizer") return 0;
  auto tok = data::make_tokenizer(c);
  log::info("tokenizer: {}", tok->describe());
  return tok->vocab_size();
}

int run_training_job(TrainArgs args, const JobHooks& hooks) {
  auto& ck = args.checkpoint;
  if (ck.exit_duration_in_mins > 0) {
    // The --exit-signal-handler path: every rank agrees at the next iteration
    // boundary, saves (with --save) and exits 0.
    ck.exit_signal_handler = true;
    const auto after = std::chrono::duration<double, std::ratio<60>>(ck.exit_duration_in_mins);
    std::thread([after] {
      std::this_thread::sleep_for(after);
      log::info("--exit-duration-in-mins reached: stopping at the next iteration boundary");
      std::raise(SIGTERM);
    }).detach();
  }
  if (args.model.vocab_size == 0) args.model.vocab_size = vocab_size_from_tokenizer(args.tokenizer);
  if (ck.exit_signal_handler) install_exit_signal_handler();
  // Rank and world size from torchrun / Slurm / Open MPI / tripod launch.
  const comm::RankInfo info = comm::resolve_rank_info();
  if (args.device.empty()) args.device = hooks.default_device(info);
  // One job script both starts and resumes a run (Megatron's behaviour):
  // --load naming a directory without a checkpoint yet is a fresh start.
  // A damaged checkpoint still stops the run (ckpt::load_dir_has_checkpoint).
  TRIPOD_CHECK_HINT(ck.ckpt_step < 0 || !ck.load.empty(), "pass --load DIR with --ckpt-step",
                    "--ckpt-step {} names an iteration to load, but there is no --load", ck.ckpt_step);
  if (!ck.load.empty()) {
    std::string why;
    if (ck.ckpt_step < 0 && !ckpt::load_dir_has_checkpoint(ck.load, &why)) {
      if (info.rank == 0)
        log::warn("--load {}: no checkpoint to resume from ({}); starting from scratch", ck.load, why);
      ck.load.clear();
    }
  }
  BuiltBackend built = hooks.make_backend(args, info);
  backend::Backend& be = *built.backend;
  be.set_deterministic(args.deterministic_mode);
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(args.parallel.distributed_timeout_minutes * 60000));
  auto ctx = comm::DistContext::init(info, be.device().type, timeout, built.comm);
  // Every rank started with the same model, layout, batch, optimizer and data
  // flags, or every rank stops naming the first difference (NOTE [Args agreement]).
  if (auto store = ctx->store()) check_args_agree(*store, ctx->rank(), ctx->world_size(), args, timeout);
  // NCCL collectives (and the host staging of Gloo ones) queue after the
  // model's kernels instead of waiting for the whole device.
  ctx->set_device_stream(be.native_stream());
  // From here on the layout's sizes are the job's (the Trainer reads them
  // from the groups); it records the interleaving so start-up prints "(vpp N)".
  const auto layout = parallel::Layout::make(ctx->world_size(), args.parallel.tp, args.parallel.pp,
                                             virtual_pipeline_size(args))
                          .with_expert_parallel(args.parallel.ep);
  const auto groups = parallel::make_process_groups(*ctx, layout);
  try {
    Trainer trainer(args, be, &groups);
    trainer.run();
    if (!args.dump_weights.empty()) trainer.dump_weights(args.dump_weights);
  } catch (const OutOfMemoryError& e) {
    ctx->abort();
    throw Error(hooks.oom_advice(e, args, layout, groups.global_rank, info.local_world_size), e.hint());
  } catch (...) {
    ctx->abort();  // peers blocked in a collective with this rank end now, not at the timeout
    throw;
  }
  return 0;
}

}  // namespace tripod::train
