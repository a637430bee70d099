// `tripod doctor`: check the machine and the launch environment before a run
// (mission step 1). One line per check (pass/info/warn/fail, what was found,
// the fix), then a summary; exit code 1 when any check fails. Under a
// launcher with more than one rank it also rendezvouses and measures
// all-reduce bus bandwidth across the job. Flags only; the checks are
// doctor/checks.h and doctor/comm_check.h. docs/doctor.md.
//   tripod doctor --model-params 1.3e9 --save /ckpt --tensor-model-parallel-size 8
//   torchrun --nproc-per-node 8 --no-python tripod doctor
//   tripod doctor -- TRAIN FLAGS     (also: will this run fit the GPUs? plan/oom_advice.h)
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "base/error.h"
#include "cli/command.h"
#include "cli/device.h"
#include "cli/plan_job.h"
#include "cli/table_flags.h"
#include "comm/context.h"
#include "comm/rendezvous.h"
#include "doctor/checks.h"
#include "doctor/comm_check.h"
#include "train/job.h"

namespace tripod::cli {
namespace {

using doctor::CheckResult;
using doctor::Status;

struct DoctorArgs {
  doctor::DoctorOptions opts;
  double model_params = 0;
  bool json = false, no_bandwidth = false;
  std::vector<int64_t> sizes_mib = {1, 16, 64};
  int iters = 5;
  std::string device = "auto";
  double timeout_s = 60;
  double gpu_memory_gb = 0;            // 0: the GPUs found
  int nnodes = 0, gpus_per_node = 0;   // 0: this job's (launcher) or this machine's GPUs
  std::vector<std::string> train_argv;  // after `--`: the run's `tripod train` flags
};

// `-- TRAIN FLAGS`: parsed as `tripod train` parses them (same flags, same
// errors for unknown or rejected ones).
train::TrainArgs parse_train_part(const std::vector<std::string>& words) {
  CLI::App app{"the training flags after `tripod doctor --`", "tripod doctor --"};
  train::TrainArgs args;
  TableFlags flags;
  flags.add_to(app, train::kTrain, args);
  for (CLI::Option* o : app.get_options()) o->required(false);  // the run's length does not matter here
  std::vector<std::string> rev(words.rbegin(), words.rend());
  try {
    app.parse(rev);
  } catch (const CLI::ParseError& e) {
    TRIPOD_FAIL("tripod doctor -- ...: {} (the flags after `--` are `tripod train` flags)", e.what());
  }
  flags.apply(app, false);
  args.finalize();
  if (args.model.vocab_size == 0) args.model.vocab_size = train::vocab_size_from_tokenizer(args.tokenizer);
  if (args.model.vocab_size == 0) args.model.vocab_size = 50257;
  return args;
}

// Will the run fit? The plan's prediction for its layout on this job's GPUs.
CheckResult memory_check(const DoctorArgs& a, const comm::RankInfo& info, bool under_launcher,
                         const doctor::CudaInventory& inv) {
  train::TrainArgs args = parse_train_part(a.train_argv);
  double capacity = a.gpu_memory_gb * double(1ull << 30);
  std::string where = fmt::format("--gpu-memory-gb {}", a.gpu_memory_gb);
  if (capacity <= 0 && !inv.gpus.empty()) {
    capacity = double(inv.gpus.front().memory_bytes);
    where = inv.gpus.front().name;
  }
  if (capacity <= 0)
    return {"gpu-memory-fit", Status::kInfo, "no GPU here to check the run's memory against",
            "pass --gpu-memory-gb G (the target GPU's memory) to check the fit from this machine"};
  args.device = "cuda";
  // The cluster asked about (--nnodes / --gpus-per-node), else the
  // launcher's job, else this machine's GPUs.
  int world = under_launcher ? info.world_size : std::max<int>(1, int(inv.gpus.size()));
  int local = under_launcher ? info.local_world_size : world;
  if (a.gpus_per_node > 0 || a.nnodes > 0) {
    local = a.gpus_per_node > 0 ? a.gpus_per_node : local;
    world = std::max(1, a.nnodes) * local;
    where += fmt::format(", {} node(s) x {} GPUs", std::max(1, a.nnodes), local);
  }
  const plan::MemoryFit f = plan::memory_fit_check(plan_job(args, world, local), capacity);
  return {"gpu-memory-fit", f.fits ? Status::kPass : Status::kFail,
          fmt::format("{} GPU(s) ({}): {}", world, where, f.finding), f.fix};
}

std::string hostname() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

// Rendezvous over the launcher's variables and time all-reduce on the
// world. A rendezvous that fails is itself the finding (address, port, why).
CheckResult bandwidth_check(const DoctorArgs& a, const comm::RankInfo& info, const doctor::CudaInventory& inv) {
  std::string device = a.device;
  if (device == "auto") device = inv.gpus.empty() ? "cpu" : "cuda";
  try {
    std::unique_ptr<backend::Backend> be;
    if (device != "cpu") be = make_backend(device, info.local_rank);
    auto ctx = comm::DistContext::init(info, be ? be->device().type : DeviceType::CPU,
                                       std::chrono::milliseconds(int64_t(a.timeout_s * 1000)));
    std::vector<int64_t> bytes;
    for (int64_t m : a.sizes_mib) bytes.push_back(m << 20);
    auto points = doctor::measure_all_reduce(*ctx->world(), be.get(), bytes, a.iters);
    return doctor::check_all_reduce(points, ctx->world_size(), device == "cpu" ? "Gloo (CPU)" : "NCCL (GPU)");
  } catch (const std::exception& e) {
    return {"all-reduce-busbw", Status::kFail,
            fmt::format("rendezvous/all-reduce at {}:{} failed: {}", info.master_addr, info.master_port, e.what()),
            "check MASTER_ADDR/MASTER_PORT on every node, the firewall, and NCCL_SOCKET_IFNAME (see the checks "
            "above)"};
  }
}

void print_text(const std::vector<CheckResult>& checks, const std::string& header) {
  if (!header.empty()) std::printf("%s\n", header.c_str());
  size_t w = 0;
  for (const auto& c : checks) w = std::max(w, c.name.size());
  for (const auto& c : checks) {
    std::printf("[%s] %-*s  %s\n", doctor::to_string(c.status), int(w), c.name.c_str(), c.finding.c_str());
    if (!c.fix.empty() && c.status != Status::kPass)
      std::printf("       %-*s  fix: %s\n", int(w), "", c.fix.c_str());
  }
}

int run_doctor(int argc, char** argv) {
  CLI::App app{"Check this machine and the launch environment: GPUs, driver/CUDA/NCCL versions, topology, host "
               "RAM, /dev/shm, disk and NFS, NCCL and launcher variables, the rendezvous port, and (under a "
               "launcher) all-reduce bandwidth. Exit code 1 when a check fails.\n"
               "Examples: tripod doctor --model-params 1.3e9 --save /ckpt\n"
               "          torchrun --nproc-per-node 8 --no-python tripod doctor"};
  DoctorArgs a;
  app.add_option("--model-params", a.model_params, "parameters of the model to train (e.g. 1.3e9): RAM and disk");
  app.add_option("--save", a.opts.save_dir, "checkpoint directory (free space, NFS)")->capture_default_str();
  app.add_option("--tensor-model-parallel-size", a.opts.tp, "check that TP groups stay on NVLink");
  app.add_option("--connect-timeout-ms", a.opts.connect_timeout_ms, "MASTER_ADDR:MASTER_PORT probe")
      ->capture_default_str();
  app.add_flag("--no-bandwidth", a.no_bandwidth, "skip the all-reduce test under a launcher");
  app.add_option("--bandwidth-sizes-mib", a.sizes_mib, "all-reduce sizes")->capture_default_str();
  app.add_option("--bandwidth-iters", a.iters)->capture_default_str();
  app.add_option("--device", a.device, "all-reduce on: auto, cpu (Gloo), cuda (NCCL)")->capture_default_str();
  app.add_option("--timeout-seconds", a.timeout_s, "rendezvous and collective timeout")->capture_default_str();
  app.add_flag("--json", a.json, "print JSON");
  app.add_option("--gpu-memory-gb", a.gpu_memory_gb,
                 "with `-- TRAIN FLAGS`: GiB per GPU to check the run against (default: the GPUs found)");
  app.add_option("--nnodes", a.nnodes,
                 "with `-- TRAIN FLAGS`: nodes of the cluster to check the run's layout on (default: this job's, or "
                 "this machine)");
  app.add_option("--gpus-per-node", a.gpus_per_node,
                 "with `-- TRAIN FLAGS`: GPUs per node of that cluster (default: the launcher's ranks per node, or "
                 "the GPUs found)");
  app.footer("With `-- TRAIN FLAGS` (the run's `tripod train` flags) doctor also predicts the run's peak memory per "
             "GPU with tripod plan's model and, when it does not fit, lists layouts that do. From a laptop: "
             "tripod doctor --nnodes 2 --gpus-per-node 8 --gpu-memory-gb 80 -- TRAIN FLAGS");
  // `tripod doctor [flags] -- TRAIN FLAGS`
  int own = argc;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--") {
      own = i;
      break;
    }
  for (int i = own + 1; i < argc; ++i) a.train_argv.emplace_back(argv[i]);
  const bool check_fit = own < argc;
  try {
    app.parse(own, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  TRIPOD_CHECK(a.model_params >= 0, "--model-params must be >= 0");
  TRIPOD_CHECK(a.iters >= 1, "--bandwidth-iters must be >= 1");
  TRIPOD_CHECK_HINT(a.nnodes >= 0 && a.gpus_per_node >= 0, "pass --nnodes N and --gpus-per-node G with N, G >= 1",
                    "--nnodes {} / --gpus-per-node {}", a.nnodes, a.gpus_per_node);
  a.opts.model_params = int64_t(a.model_params);

  comm::RankInfo info;
  std::vector<CheckResult> checks;
  try {
    info = comm::resolve_rank_info();
  } catch (const std::exception& e) {
    checks.push_back({"launch-env", Status::kFail, e.what(), "fix the launcher variables named above"});
  }
  auto local = doctor::run_local_checks(a.opts);
  checks.insert(checks.end(), local.begin(), local.end());
  const bool under_launcher = info.launcher != "none" && info.world_size > 1;
  if (check_fit) {
    try {
      checks.push_back(memory_check(a, info, under_launcher, doctor::gather_cuda_inventory()));
    } catch (const Error& e) {
      checks.push_back({"gpu-memory-fit", Status::kFail, e.message(), e.hint()});
    }
  }
  if (under_launcher && !a.no_bandwidth)
    checks.push_back(bandwidth_check(a, info, doctor::gather_cuda_inventory()));
  else if (!under_launcher)
    checks.push_back({"all-reduce-busbw", Status::kInfo, "not under a launcher: no collective test",
                      "run under torchrun/srun/mpirun/tripod launch to measure bus bandwidth across the job"});

  int counts[4] = {0, 0, 0, 0};
  for (const auto& c : checks) counts[int(c.status)]++;
  // One report per node (local rank 0) keeps a 64-rank job readable; the
  // bandwidth line is the same on every rank.
  const bool report = info.local_rank == 0;
  if (report && a.json) {
    nlohmann::json j;
    j["host"] = hostname();
    j["rank"] = info.rank;
    j["checks"] = nlohmann::json::array();
    for (const auto& c : checks)
      j["checks"].push_back({{"name", c.name}, {"status", doctor::to_string(c.status)}, {"finding", c.finding},
                             {"fix", c.fix}});
    j["summary"] = {{"pass", counts[0]}, {"info", counts[1]}, {"warn", counts[2]}, {"fail", counts[3]}};
    std::printf("%s\n", j.dump(2).c_str());
  } else if (report) {
    print_text(checks, under_launcher ? fmt::format("# tripod doctor on {} (rank {} of {}, {})", hostname(),
                                                    info.rank, info.world_size, info.launcher)
                                      : fmt::format("# tripod doctor on {}", hostname()));
    std::printf("\nsummary: %d pass, %d info, %d warn, %d fail%s\n", counts[0], counts[1], counts[2], counts[3],
                counts[3] ? " -- fix the failures before training" : "");
  }
  std::fflush(stdout);
  return counts[3] > 0 ? 1 : 0;
}

}  // namespace
}  // namespace tripod::cli

TRIPOD_REGISTER_COMMAND(doctor, "doctor",
                        "check GPUs, versions, topology, RAM, /dev/shm, disk, NCCL/launch variables, bandwidth",
                        tripod::cli::run_doctor);
