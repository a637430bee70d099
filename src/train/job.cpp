// Implementation of train/job.h.
#include "train/job.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "base/log.h"
#include "ckpt/sharded_checkpoint.h"
#include "parallel/groups.h"
#include "train/args_agreement.h"
#include "train/exit_signal.h"
#include "train/output_checks.h"
#include "train/trainer.h"

namespace tripod::train {

int64_t vocab_size_from_tokenizer(const data::TokenizerConfig& tc) {
  if (tc.type.empty() && tc.vocab_file.empty() && tc.tokenizer_model.empty()) return 0;
  data::TokenizerConfig c = tc;
  if (c.type.empty()) c.type = data::default_tokenizer_type(c.tokenizer_model);
  if (data::tokenizer_type_for(c.type) == "NullTokenizer") return 0;
  auto tok = data::make_tokenizer(c);
  log::info("tokenizer: {}", tok->describe());
  return tok->vocab_size();
}

int64_t resolve_vocab_size(int64_t vocab_size, const data::TokenizerConfig& tc) {
  if (vocab_size == 0) return vocab_size_from_tokenizer(tc);
  if (!tc.type.empty()) (void)data::tokenizer_type_for(tc.type);  // a wrong name stops here too
  if (tc.vocab_file.empty() && tc.tokenizer_model.empty()) return vocab_size;  // no files: nothing to compare
  const int64_t from_tokenizer = vocab_size_from_tokenizer(tc);
  // The checkpoint records the tokenizer, and ids the model has no row for
  // would stop `tripod generate` (or index past the embedding) later.
  TRIPOD_CHECK_HINT(from_tokenizer == 0 || vocab_size >= from_tokenizer,
                    fmt::format("drop --vocab-size (the tokenizer sets it to {}), or pass --vocab-size {} or more",
                                from_tokenizer, from_tokenizer),
                    "--vocab-size {} is smaller than the tokenizer's vocabulary of {} tokens: its ids {}..{} would "
                    "have no embedding row",
                    vocab_size, from_tokenizer, vocab_size, from_tokenizer - 1);
  return vocab_size;
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
  args.model.vocab_size = resolve_vocab_size(args.model.vocab_size, args.tokenizer);
  install_exit_signal_handler();  // NOTE [Exit signal]: always, --exit-signal-handler changes the exit code
  // Rank and world size from torchrun / Slurm / Open MPI / tripod launch.
  const comm::RankInfo info = comm::resolve_rank_info();
  if (args.model.vocab_size == 0) {
    const log::ScopedMinLevel once(info.rank == 0 ? log::Level::Debug : log::Level::Warn);  // its line on rank 0
    args.model.vocab_size = vocab_size_from_tokenizer(args.tokenizer);
  }
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
  // Every path the run writes, and the --save folder's lock, before the model
  // is built (train/output_checks.h); the lock is held until the job ends.
  const char* slurm_job = std::getenv("SLURM_JOB_ID");
  const std::string job = slurm_job && *slurm_job ? fmt::format("slurm {}", slurm_job)
                          : ctx->world_size() > 1 ? info.job_token : std::string("tripod train, one process");
  const auto save_lock = check_run_outputs(args, ctx->rank(), ctx->world_size(), ctx->store().get(), timeout, job);
  // NCCL collectives (and the host staging of Gloo ones) queue after the
  // model's kernels instead of waiting for the whole device.
  ctx->set_device_stream(be.native_stream());
  // From here on the layout's sizes are the job's (the Trainer reads them
  // from the groups); it records the interleaving so start-up prints "(vpp N)".
  const auto layout = parallel::Layout::make(ctx->world_size(), args.parallel.tp, args.parallel.pp,
                                             virtual_pipeline_size(args), args.parallel.cp)
                          .with_expert_parallel(args.parallel.ep, expert_tensor_parallel_size(args));
  auto groups = parallel::make_process_groups(*ctx, layout);
  parallel::make_distributed_optimizer_instance_groups(*ctx, groups,
                                                      args.parallel.ddp.num_distributed_optimizer_instances);
  try {
    Trainer trainer(args, be, &groups);
    trainer.run();
    if (trainer.stop_signal() != 0 && !ck.exit_signal_handler) return 128 + trainer.stop_signal();
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
