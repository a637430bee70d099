// `tripod bench comm`: communication benchmark in the spirit of nccl-tests
// (time, algbw, busbw per collective and size, with a data check before
// timing), and `--check`, which verifies every collective on every group of
// a layout against analytic values (used by the launcher tests).
//
// Bandwidths are defined exactly as nccl-tests' doc/PERFORMANCE.md:
//   algbw = S / t, S = bytes of the full buffer (all_gather: the gathered
//           output; reduce_scatter: the input), t = time of one op
//   busbw = algbw x factor: all_reduce 2(n-1)/n, all_gather and
//           reduce_scatter (n-1)/n, broadcast and send/recv 1.
// t is the slowest rank's mean over --iters.
//
// Relates to: parallel/groups_check.h, comm/context.h, docs/distributed.md.
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
#include "cli/command.h"
#include "cli/device.h"
#include "comm/context.h"
#include "comm/rendezvous.h"
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

double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "all_gather" || op == "reduce_scatter") return double(n - 1) / n;
  return 1.0;
}

// A buffer as the communicator sees it (`dev`: on the GPU for NCCL, the
// host tensor itself for Gloo) and its host mirror for filling and checking.
struct Buf {
  Tensor host, dev;
};

class Buffers {
 public:
  explicit Buffers(backend::Backend* be) : be_(be) {}  // be: null on the CPU
  Buf make(int64_t n) {
    Buf b;
    b.host = Tensor::empty({n}, DType::F32);
    b.dev = be_ ? be_->empty({n}, DType::F32) : b.host;
    return b;
  }
  void up(Buf& b) {
    if (be_) be_->copy(b.dev, b.host), be_->synchronize();
  }
  void down(Buf& b) {
    if (be_) be_->copy(b.host, b.dev), be_->synchronize();
  }

 private:
  backend::Backend* be_;
};

// One op on `bytes` of f32: `run` runs it once; `wrong` checks the result
// against its analytic value (number of wrong elements) and re-arms inputs.
struct OpCase {
  std::function<void()> run;
  std::function<int64_t()> wrong;
};

// Counts elements of b (after copying it to the host) that differ from want(i).
template <typename Want>
int64_t count_wrong(Buffers& bufs, Buf b, Want want) {
  bufs.down(b);
  int64_t w = 0;
  const float* h = b.host.data<float>();
  for (int64_t i = 0; i < b.host.numel(); ++i) w += h[i] != want(i);
  return w;
}

template <typename Fill>
void fill(Buffers& bufs, Buf& b, Fill value) {
  float* h = b.host.data<float>();
  for (int64_t i = 0; i < b.host.numel(); ++i) h[i] = value(i);
  bufs.up(b);
}

OpCase make_case(const std::string& op, Communicator& c, int64_t bytes, Buffers& bufs) {
  const int n = c.size(), gr = c.rank();
  const int64_t total = std::max<int64_t>(1, bytes / 4);
  const int64_t per = std::max<int64_t>(1, total / n);
  OpCase oc;
  Buffers* B = &bufs;
  if (op == "all_reduce") {
    Buf t = bufs.make(total);
    auto init = [=]() mutable { fill(*B, t, [&](int64_t) { return float(gr + 1); }); };
    init();
    oc.run = [&c, t]() mutable { c.all_reduce(t.dev)->wait(); };
    oc.wrong = [=]() mutable {
      int64_t w = count_wrong(*B, t, [&](int64_t) { return float(n * (n + 1) / 2); });
      init();
      return w;
    };
  } else if (op == "all_gather") {
    Buf in = bufs.make(per), out = bufs.make(per * n);
    fill(bufs, in, [&](int64_t) { return float(gr); });
    oc.run = [&c, in, out]() mutable { c.all_gather(out.dev, in.dev)->wait(); };
    oc.wrong = [=] { return count_wrong(*B, out, [&](int64_t i) { return float(i / per); }); };
  } else if (op == "reduce_scatter") {
    Buf in = bufs.make(per * n), out = bufs.make(per);
    fill(bufs, in, [&](int64_t i) { return float(i / per + gr); });
    oc.run = [&c, in, out]() mutable { c.reduce_scatter(out.dev, in.dev)->wait(); };
    // sum over ranks r of (gr + r)
    oc.wrong = [=] { return count_wrong(*B, out, [&](int64_t) { return float(n * gr + n * (n - 1) / 2); }); };
  } else if (op == "broadcast") {
    Buf t = bufs.make(total);
    fill(bufs, t, [&](int64_t) { return gr == 0 ? 42.0f : 0.0f; });
    oc.run = [&c, t]() mutable { c.broadcast(t.dev, {0})->wait(); };
    oc.wrong = [=] { return count_wrong(*B, t, [](int64_t) { return 42.0f; }); };
  } else if (op == "sendrecv") {
    TRIPOD_CHECK(n > 1, "sendrecv needs a group of 2 or more ranks");
    Buf s = bufs.make(total), r = bufs.make(total);
    fill(bufs, s, [&](int64_t) { return float(gr); });
    oc.run = [&c, s, r, n, gr]() mutable {
      // Even ranks send first, odd ranks receive first (as Megatron pairs
      // p2p), so a communicator that serialises p2p cannot deadlock.
      std::shared_ptr<comm::Work> a, b;
      if (gr % 2 == 0) a = c.send(s.dev, (gr + 1) % n), b = c.recv(r.dev, (gr + n - 1) % n);
      else a = c.recv(r.dev, (gr + n - 1) % n), b = c.send(s.dev, (gr + 1) % n);
      a->wait();
      b->wait();
    };
    oc.wrong = [=] { return count_wrong(*B, r, [&](int64_t) { return float((gr + n - 1) % n); }); };
  } else {
    TRIPOD_FAIL("--ops: unknown op '{}' (all_reduce, all_gather, reduce_scatter, broadcast, sendrecv)", op);
  }
  return oc;
}

// op over the world of one value per rank (through device buffers on GPUs).
double world_reduce(Communicator& world, Buffers& bufs, double v, comm::ReduceOp op) {
  Buf b = bufs.make(1);
  fill(bufs, b, [&](int64_t) { return float(v); });
  world.all_reduce(b.dev, {op})->wait();
  bufs.down(b);
  return b.host.data<float>()[0];
}

void run_bench(const CommArgs& a, const parallel::ProcessGroups& pg, int local_world_size, Buffers& bufs) {
  std::map<std::string, std::shared_ptr<Communicator>> by_name = {
      {"world", pg.world}, {"tp", pg.tp}, {"dp", pg.dp}, {"pp", pg.pp}, {"mp", pg.mp}};
  TRIPOD_CHECK(by_name.count(a.group), "--group must be world, tp, dp, pp or mp; got '{}'", a.group);
  Communicator& c = *by_name[a.group];
  Communicator& world = *pg.world;
  const bool root = pg.global_rank == 0;
  if (root) {
    const std::string via = comm::comm_backend_name(a.device == "cpu" ? DeviceType::CPU : DeviceType::CUDA,
                                                    comm_backend_for(a.device, a.backend));
    std::printf("# tripod bench comm: %s, group %s (size %d), f32 on %s via %s, %d iters after %d warm-up\n",
                pg.layout.str().c_str(), a.group.c_str(), c.size(), a.device.c_str(), via.c_str(), a.iters,
                a.warmup);
    std::printf("# %12s %12s %-15s %12s %12s %12s %8s\n", "size(B)", "count", "op", "time(us)",
                "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }
  std::stringstream ss(a.ops);
  std::string op;
  int64_t total_wrong = 0;
  int64_t links_bytes = 0;
  double links_busbw = 0;
  while (std::getline(ss, op, ',')) {
    if (op == "sendrecv" && c.size() == 1) continue;
    for (int64_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= a.step_factor) {
      const bool bigger = pg.global_rank == a.fault_size_mismatch_rank;
      OpCase oc = make_case(op, c, bigger ? 2 * bytes : bytes, bufs);
      oc.run();  // data check before timing
      const int64_t wrong = int64_t(world_reduce(world, bufs, double(oc.wrong()), comm::ReduceOp::Sum));
      total_wrong += wrong;
      for (int i = 0; i < a.warmup; ++i) oc.run();
      world.barrier();
      Timer timer;
      for (int i = 0; i < a.iters; ++i) oc.run();
      const double t = world_reduce(world, bufs, timer.seconds() / a.iters, comm::ReduceOp::Max);
      const int64_t count = std::max<int64_t>(1, bytes / 4);
      const int64_t sized = op == "all_gather" || op == "reduce_scatter"
                                ? std::max<int64_t>(1, count / c.size()) * c.size() * 4
                                : count * 4;
      const double algbw = double(sized) / t / 1e9;
      if (op == "all_reduce" && sized >= links_bytes) links_bytes = sized, links_busbw = algbw * bus_factor(op, c.size());
      if (root)
        std::printf("  %12lld %12lld %-15s %12.1f %12.4f %12.4f %8lld\n", (long long)sized,
                    (long long)(sized / 4), op.c_str(), t * 1e6, algbw, algbw * bus_factor(op, c.size()),
                    (long long)wrong);
    }
  }
  if (root) std::fflush(stdout);
  TRIPOD_CHECK(total_wrong == 0, "bench comm: {} wrong elements in the data checks", total_wrong);
  if (a.links_out.empty()) return;
  // Whether the group leaves a node: nodes hold LOCAL_WORLD_SIZE consecutive ranks.
  const double node = double(pg.global_rank / std::max(1, local_world_size));
  const double hi = world_reduce(c, bufs, node, comm::ReduceOp::Max);
  const double lo = -world_reduce(c, bufs, -node, comm::ReduceOp::Max);
  if (!root) return;
  const nlohmann::json j = {{"format", 1},
                            {"what", "tripod bench comm: bus bandwidth of the largest all_reduce"},
                            {"group", a.group},
                            {"group_size", c.size()},
                            {"spans_nodes", hi != lo},
                            {"device", a.device},
                            {"bytes", links_bytes},
                            {"busbw_gbs", links_busbw}};
  ckpt::write_text_atomic(a.links_out, j.dump(1) + "\n");
  std::printf("# wrote %s: all_reduce %lld B over %d ranks (%s), bus bandwidth %.2f GB/s; use it with "
              "`tripod plan --links %s`\n",
              a.links_out.c_str(), (long long)links_bytes, c.size(), hi != lo ? "across nodes" : "within a node",
              links_busbw, a.links_out.c_str());
  std::fflush(stdout);
}

int run_comm(const CommArgs& a) {
  const auto timeout = std::chrono::milliseconds(int64_t(a.timeout_minutes * 60e3));
  comm::RankInfo info = comm::resolve_rank_info();
  TRIPOD_CHECK_HINT(!a.check || a.device == "cpu", "run --check with --device cpu",
                    "--check verifies the CPU communicators only");
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
    auto rep = parallel::check_process_groups(pg, sizes);
    if (ctx->rank() == 0)
      std::printf("comm check passed: %s, launcher %s, %d groups per rank, %lld ops per rank, "
                  "sizes 1..%lld elements, %.2f s\n",
                  layout.str().c_str(), info.launcher.c_str(), rep.groups_checked,
                  (long long)rep.ops_checked, (long long)sizes.back(), t.seconds());
    std::fflush(stdout);
    return 0;
  }
  Buffers bufs(be.get());
  run_bench(a, pg, info.local_world_size, bufs);
  return 0;
}

int run_bench_cmd(int argc, char** argv) {
  CLI::App app{"Benchmarks. `tripod bench comm`: collective time/algbw/busbw (nccl-tests definitions)",
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
  comm->add_option("--ops", a.ops, "comma-separated")->capture_default_str();
  comm->add_option("--group", a.group, "world | tp | dp | pp | mp")->capture_default_str();
  comm->add_option("--device", a.device, "cpu (Gloo) or cuda (NCCL, one GPU per rank)")->capture_default_str();
  comm->add_option("--distributed-backend", a.backend,
                   "nccl (cuda default) | gloo (cuda: staged through host memory; ranks may share a GPU)");
  comm->add_option("--distributed-timeout-minutes", a.timeout_minutes, "every wait's timeout (fractions allowed)")
      ->capture_default_str();
  comm->add_option("--links-out", a.links_out,
                   "write the largest all_reduce's bus bandwidth over --group (and whether the group spans nodes) "
                   "to this JSON file, for `tripod plan --links FILE`");
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
  TRIPOD_CHECK(a.step_factor >= 2, "--step-factor must be >= 2");
  TRIPOD_CHECK(a.iters >= 1, "--iters must be >= 1");
  TRIPOD_CHECK_HINT(a.links_out.empty() || a.ops.find("all_reduce") != std::string::npos,
                    "add all_reduce to --ops (or leave --ops at its default)",
                    "--links-out records the all_reduce bandwidth, but --ops {} has none", a.ops);
  return run_comm(a);
}

}  // namespace
}  // namespace tripod::cli

TRIPOD_REGISTER_COMMAND(bench, "bench", "benchmarks: `bench comm` (collective bandwidth, nccl-tests style)",
                        tripod::cli::run_bench_cmd);
