// `tripod bench comm`: the flags of the communication benchmark
// (doctor/comm_bench.h: time, algbw, busbw per collective and size, with a
// data check before timing, as nccl-tests), its printed table and --links-out
// file, and `--check`, which verifies every collective on every group of a
// layout against analytic values (parallel/groups_check.h; used by the
// launcher tests).
//
// Relates to: doctor/comm_bench.h, parallel/groups_check.h, comm/context.h,
// docs/distributed.md.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "base/timer.h"
#include "backend/ops.h"
#include "ckpt/atomic_io.h"
#include "cli/bench_cp.h"
#include "cli/command.h"
#include "cli/device.h"
#include "comm/context.h"
#include "comm/ipc/ipc_communicator.h"
#include "comm/rendezvous.h"
#include "doctor/comm_bench.h"
#include "parallel/groups.h"
#include "parallel/groups_check.h"

namespace tripod::cli {
namespace {

using comm::Communicator;

struct CommArgs {
  int tp = 1, pp = 1;
  bool check = false;
  std::vector<int64_t> check_sizes;
  int64_t min_bytes = 8, max_bytes = 16 << 20;
  int step_factor = 4;
  int iters = 10, warmup = 3;
  std::string ops = "all_reduce,all_gather,reduce_scatter,broadcast,sendrecv";
  std::string backend;  // --distributed-backend; "" = the device's default
  std::string group = "world";
  double timeout_minutes = 10;
  std::string device = "cpu";
  int fault_hang_rank = -1, fault_kill_rank = -1, fault_kill_after_ms = 300;
  int fault_size_mismatch_rank = -1;  // this rank's buffers are twice the others'
  std::string links_out;  // --links-out: the largest all_reduce's bus bandwidth, for `tripod plan --links`
};

void run_bench(const CommArgs& a, const parallel::ProcessGroups& pg, int local_world_size, backend::Backend* be) {
  std::map<std::string, std::shared_ptr<Communicator>> by_name = {
      {"world", pg.world}, {"tp", pg.tp}, {"dp", pg.dp}, {"pp", pg.pp}, {"mp", pg.mp}};
  TRIPOD_CHECK(by_name.count(a.group), "--group must be world, tp, dp, pp or mp; got '{}'", a.group);
  Communicator& c = *by_name[a.group];
  const bool root = pg.global_rank == 0;
  if (root) {
    const std::string via = comm::comm_backend_name(a.device == "cpu" ? DeviceType::CPU : DeviceType::CUDA,
                                                    comm_backend_for(a.device, a.backend));
    const std::string ipc = comm::is_ipc_communicator(c) ? " (collectives through shared memory: IPC)" : "";
    std::printf("# tripod bench comm: %s, group %s (size %d), f32 on %s via %s%s, %d iters after %d warm-up\n",
                pg.layout.str().c_str(), a.group.c_str(), c.size(), a.device.c_str(), via.c_str(), ipc.c_str(), a.iters,
                a.warmup);
    std::printf("# %12s %12s %-15s %12s %12s %12s %8s\n", "size(B)", "count", "op", "time(us)",
                "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }
  doctor::CommBenchOptions o;
  std::stringstream ss(a.ops);
  for (std::string op; std::getline(ss, op, ',');) o.ops.push_back(op);
  o.min_bytes = a.min_bytes;
  o.max_bytes = a.max_bytes;
  o.step_factor = a.step_factor;
  o.iters = a.iters;
  o.warmup = a.warmup;
  o.size_mismatch_rank = a.fault_size_mismatch_rank;
  auto print_row = [&](const doctor::CommBenchRow& r) {
    if (!root) return;
    std::printf("  %12lld %12lld %-15s %12.1f %12.4f %12.4f %8lld\n", (long long)r.bytes, (long long)(r.bytes / 4),
                r.op.c_str(), r.seconds * 1e6, r.algbw_gbs, r.busbw_gbs, (long long)r.wrong);
    std::fflush(stdout);
  };
  doctor::CommBenchLinks links;
  doctor::bench_collectives(o, c, *pg.world, pg.global_rank, be, print_row, local_world_size,
                            a.links_out.empty() ? nullptr : &links);
  if (a.links_out.empty() || !root) return;
  nlohmann::json j = {{"format", 1},
                            {"what", "tripod bench comm: bus bandwidth of the largest all_reduce"},
                            {"group", a.group},
                            {"group_size", c.size()},
                            {"spans_nodes", links.spans_nodes},
                            {"device", a.device},
                            {"bytes", links.bytes},
                            {"busbw_gbs", links.busbw_gbs}};
  if (links.all_to_all_bytes > 0)  // --ops with all_to_all: the MoE exchange's figure too
    j["all_to_all"] = {{"bytes", links.all_to_all_bytes}, {"busbw_gbs", links.all_to_all_busbw_gbs}};
  ckpt::write_text_atomic(a.links_out, j.dump(1) + "\n");
  std::printf("# wrote %s: all_reduce %lld B over %d ranks (%s), bus bandwidth %.2f GB/s; use it with "
              "`tripod plan --links %s`\n",
              a.links_out.c_str(), (long long)links.bytes, c.size(),
              links.spans_nodes ? "across nodes" : "within a node", links.busbw_gbs, a.links_out.c_str());
  std::fflush(stdout);
}

int run_comm(const CommArgs& a) {
  const auto timeout = std::chrono::milliseconds(int64_t(a.timeout_minutes * 60e3));
  comm::RankInfo info = comm::resolve_rank_info();
  // GPU runs: buffers live on this rank's GPU (LOCAL_RANK) and NCCL moves them.
  // With --distributed-backend gloo, Gloo moves them through pinned host
  // buffers and ranks may share a GPU (the staged collectives' correctness).
  const comm::CommBackend backend = comm_backend_for(a.device, a.backend);
  std::unique_ptr<backend::Backend> be;
  if (a.device != "cpu") be = make_backend(a.device, info, backend);
  auto ctx = comm::DistContext::init(info, be ? be->device().type : DeviceType::CPU, timeout, backend);
  if (be) ctx->set_device_stream(be->native_stream());
  const auto layout = parallel::Layout::make(ctx->world_size(), a.tp, a.pp);
  auto pg = parallel::make_process_groups(*ctx, layout);
  if (ctx->rank() == a.fault_hang_rank) {
    log::warn("rank {}: --fault-hang-rank: sleeping instead of communicating", ctx->rank());
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  if (ctx->rank() == a.fault_kill_rank) {
    std::thread([ms = a.fault_kill_after_ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      ::raise(SIGKILL);
    }).detach();
  }
  if (a.check) {
    Timer t;
    auto sizes = a.check_sizes.empty() ? parallel::default_check_sizes() : a.check_sizes;
    // On a GPU the buffers live on the device, so the check covers what the
    // training run's communicators move: NCCL, or Gloo/IPC staging the GPU.
    std::unique_ptr<parallel::CheckDevice> dev;
    if (be)
      dev.reset(new parallel::CheckDevice{be->device(), [&](Tensor& d, const Tensor& s) { be->copy(d, s); },
                                          [&] { be->synchronize(); }});
    auto rep = parallel::check_process_groups(pg, sizes, dev.get());
    if (ctx->rank() == 0)
      std::printf("comm check passed: %s on %s, launcher %s, %d groups per rank, %lld ops per rank, "
                  "sizes 1..%lld elements, %.2f s\n",
                  layout.str().c_str(), a.device.c_str(), info.launcher.c_str(), rep.groups_checked,
                  (long long)rep.ops_checked, (long long)sizes.back(), t.seconds());
    std::fflush(stdout);
    return 0;
  }
  run_bench(a, pg, info.local_world_size, be.get());
  return 0;
}

int run_bench_cmd(int argc, char** argv) {
  CLI::App app{"Benchmarks. `tripod bench comm`: collective time/algbw/busbw (nccl-tests definitions); "
               "`tripod bench cp`: context parallelism's attention exchanges, the ring overlapped and serialized",
               "tripod bench"};
  app.require_subcommand(1);
  CommArgs a;
  CLI::App* comm = app.add_subcommand("comm", "collectives over the job's groups (run under a launcher)");
  comm->add_option("--tensor-model-parallel-size", a.tp)->capture_default_str();
  comm->add_option("--pipeline-model-parallel-size", a.pp)->capture_default_str();
  comm->add_flag("--check", a.check, "verify every collective on every group against analytic values, then exit");
  comm->add_option("--check-sizes", a.check_sizes, "element counts for --check (default 1 .. 1500001)");
  comm->add_option("--min-bytes", a.min_bytes)->capture_default_str();
  comm->add_option("--max-bytes", a.max_bytes)->capture_default_str();
  comm->add_option("--step-factor", a.step_factor)->capture_default_str();
  comm->add_option("--iters", a.iters)->capture_default_str();
  comm->add_option("--warmup-iters", a.warmup)->capture_default_str();
  comm->add_option("--ops", a.ops, "comma-separated; also all_to_all (not run by default)")->capture_default_str();
  comm->add_option("--group", a.group, "world | tp | dp | pp | mp")->capture_default_str();
  comm->add_option("--device", a.device, "cpu (Gloo) or cuda (NCCL, one GPU per rank)")->capture_default_str();
  comm->add_option("--distributed-backend", a.backend,
                   "nccl (cuda default) | gloo (cuda: staged through host memory; ranks may share a GPU)");
  comm->add_option("--distributed-timeout-minutes", a.timeout_minutes, "every wait's timeout (fractions allowed)")
      ->capture_default_str();
  comm->add_option("--links-out", a.links_out,
                   "write the largest all_reduce's bus bandwidth over --group (and whether the group spans nodes; "
                   "with all_to_all in --ops the largest all_to_all's too) to this JSON file, for `tripod plan "
                   "--links FILE`");
  CpBenchArgs cpa;
  CLI::App* cp = app.add_subcommand("cp", "one layer's attention under context parallelism, forward + backward, per "
                                          "--cp-comm-type (run under a launcher, one rank per cp rank)");
  add_cp_bench_options(*cp, cpa);
  // Fault injection for the launcher tests; not shown in --help.
  comm->add_option("--fault-hang-rank", a.fault_hang_rank)->group("");
  comm->add_option("--fault-kill-rank", a.fault_kill_rank)->group("");
  comm->add_option("--fault-kill-after-ms", a.fault_kill_after_ms)->group("");
  comm->add_option("--fault-size-mismatch-rank", a.fault_size_mismatch_rank)->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (cp->parsed()) return run_cp_bench(cpa);
  TRIPOD_CHECK(a.step_factor >= 2, "--step-factor must be >= 2");
  TRIPOD_CHECK(a.iters >= 1, "--iters must be >= 1");
  TRIPOD_CHECK_HINT(a.links_out.empty() || a.ops.find("all_reduce") != std::string::npos,
                    "add all_reduce to --ops (or leave --ops at its default)",
                    "--links-out records the all_reduce bandwidth, but --ops {} has none", a.ops);
  return run_comm(a);
}

}  // namespace
}  // namespace tripod::cli

TRIPOD_REGISTER_COMMAND(bench, "bench",
                        "benchmarks: `bench comm` (collective bandwidth, nccl-tests style), `bench cp` (context "
                        "parallelism's attention exchanges)",
                        tripod::cli::run_bench_cmd);
