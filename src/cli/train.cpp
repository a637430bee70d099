// `tripod train`: Megatron's pretrain_gpt.py flags (the flag table,
// train/flag_table.h) -> train::TrainArgs -> train::run_training_job.
// Flags and dispatch only; the job is assembled in train/job.h.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "backend/cpu/cpu_backend.h"
#include "base/config.h"
#include "base/log.h"
#include "cli/command.h"
#include "cli/default_device.h"
#include "cli/device.h"
#include "cli/plan_job.h"
#include "cli/table_flags.h"
#include "comm/rendezvous.h"
#include "train/job.h"
#include "train/trainer.h"

namespace tripod::cli {
namespace {

// What the job needs from above train/: the device probe, the backend
// factory (its CUDA module is optional) and the OOM advice.
train::JobHooks job_hooks() {
  train::JobHooks h;
  h.default_device = [](const comm::RankInfo& info) {
    const DeviceChoice d = default_device();
    if (info.rank == 0) {
      log::info("device: {} ({}; --device overrides)", d.device, d.reason);
      if (d.gpu_without_cuda_build)
        log::warn("this node has an NVIDIA GPU but this tripod was built without CUDA, so it trains on "
                  "the CPU; rebuild with -DTRIPOD_CUDA=ON to use the GPU");
    }
    return d.device;
  };
  h.make_backend = [](const train::TrainArgs& a, const comm::RankInfo& info) {
    backend::configure_cpu_threads(info.local_world_size);
    train::BuiltBackend b;
    // A GPU job script rehearsed on CPU keeps its --distributed-backend nccl.
    b.comm = comm_backend_for(a.device, a.parallel.distributed_backend, /*cpu_nccl_as_gloo=*/true);
    if (info.rank == 0 && a.device == "cpu" && a.parallel.distributed_backend == "nccl")
      log::info("--distributed-backend nccl on a CPU run: using Gloo (NCCL needs --device cuda)");
    b.backend = make_backend(a.device, info, b.comm);
    return b;
  };
  h.oom_advice = [](const OutOfMemoryError& e, const train::TrainArgs& a, const parallel::Layout& layout, int g,
                    int local_world_size) {
    const plan::JobShape where{g, layout.tp_rank(g), layout.pp_rank(g), layout.dp_rank(g)};
    return plan::oom_advice(e, plan_job(a, layout, local_world_size), where);
  };
  return h;
}

int run_train(int argc, char** argv) {
  CLI::App app{"Train a GPT model (Megatron-LM flag names).\n"
               "Example: tripod train --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
               "--seq-length 32 --mock-data --vocab-size 512 --micro-batch-size 4 --train-iters 50 --lr 1e-3"};
  app.get_formatter()->column_width(44);
  train::TrainArgs args;
  TableFlags flags;
  flags.add_to(app, train::kTrain, args);
  bool parse_only = false;
  app.add_flag("--parse-only", parse_only, "parse the flags, report, and exit")->group("");  // testing aid
  std::string config_file;
  app.add_option("--config", config_file, train::find_flag("--config")->text);
  // --config FILE is expanded in place before parsing (base/config.h).
  std::vector<std::string> words = config::expand_config_args(argc, argv);
  std::vector<char*> expanded;
  for (auto& w : words) expanded.push_back(w.data());
  if (words.size() == 2 && words[1] == "--flags-markdown") {  // hidden: docs/megatron-flags.md from the table
    std::fputs(train::flag_docs_markdown().c_str(), stdout);
    return 0;
  }
  try {
    app.parse(static_cast<int>(expanded.size()), expanded.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // Every incompatibility of the command line in one error, not one per
  // attempt: the flags, then their values against each other and the ranks.
  const comm::RankInfo info = comm::resolve_rank_info();
  ErrorList problems;
  flags.apply(app, info.rank == 0, problems);
  // (--parse-only, a testing aid, stops after the flags themselves.)
  if (problems.collect([&] { args.finalize(); }) && !parse_only)
    train::check_command_line(args, info.world_size, problems);
  problems.throw_if_any("with the command line");
  if (parse_only) {
    log::info("flags parsed (lr warmup {} iterations)", args.optimizer.lr.warmup_iters);
    return 0;
  }
  return train::run_training_job(std::move(args), job_hooks());
}

}  // namespace

TRIPOD_REGISTER_COMMAND(train, "train", "train a GPT model (Megatron flags; CPU or CUDA)", run_train);

}  // namespace tripod::cli
