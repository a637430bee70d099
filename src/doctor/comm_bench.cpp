// Implementation of doctor/comm_bench.h.
#include "doctor/comm_bench.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "base/error.h"
#include "base/timer.h"

namespace tripod::doctor {

using comm::Communicator;

double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all") return double(n - 1) / n;
  return 1.0;
}

namespace {

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
  // dst <- src, both communicator-side buffers (device or host).
  void copy(Tensor dst, const Tensor& src) {
    if (be_) be_->copy(dst, src);
    else std::copy_n(src.data<float>(), src.numel(), dst.data<float>());
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
  } else if (op == "all_to_all") {
    // Rank gr sends block j (value gr n + j) to rank j, so it receives
    // block r of value r n + gr from every rank r (as the MoE dispatch's
    // all_to_all_v with even counts).
    Buf in = bufs.make(per * n), out = bufs.make(per * n);
    fill(bufs, in, [&](int64_t i) { return float(gr * n + i / per); });
    const std::vector<int64_t> counts(size_t(n), per);
    // all_to_all_v moves the chunks between distinct ranks; the kept one
    // is the caller's copy (as the dispatcher's).
    oc.run = [&c, in, out, counts, B, gr, per]() mutable {
      auto w = c.all_to_all_v(out.dev, in.dev, counts, counts);
      B->copy(out.dev.flat(gr * per, {per}), in.dev.flat(gr * per, {per}));
      w->wait();
    };
    oc.wrong = [=] { return count_wrong(*B, out, [&](int64_t i) { return float((i / per) * n + gr); }); };
  } else {
    TRIPOD_FAIL("--ops: unknown op '{}' (all_reduce, all_gather, reduce_scatter, broadcast, sendrecv, all_to_all)",
                op);
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

}  // namespace

void bench_collectives(const CommBenchOptions& o, Communicator& c, Communicator& world, int global_rank,
                       backend::Backend* be, const std::function<void(const CommBenchRow&)>& on_row,
                       int local_world_size, CommBenchLinks* links) {
  Buffers bufs(be);
  int64_t total_wrong = 0;
  int64_t links_bytes = 0, a2a_bytes = 0;
  double links_busbw = 0, a2a_busbw = 0;
  for (const std::string& op : o.ops) {
    if (op == "sendrecv" && c.size() == 1) continue;
    for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.step_factor) {
      const bool bigger = global_rank == o.size_mismatch_rank;
      OpCase oc = make_case(op, c, bigger ? 2 * bytes : bytes, bufs);
      oc.run();  // data check before timing
      const int64_t wrong = int64_t(world_reduce(world, bufs, double(oc.wrong()), comm::ReduceOp::Sum));
      total_wrong += wrong;
      for (int i = 0; i < o.warmup; ++i) oc.run();
      world.barrier();
      Timer timer;
      for (int i = 0; i < o.iters; ++i) oc.run();
      const double t = world_reduce(world, bufs, timer.seconds() / o.iters, comm::ReduceOp::Max);
      const int64_t count = std::max<int64_t>(1, bytes / 4);
      const int64_t sized = op == "all_gather" || op == "reduce_scatter" || op == "all_to_all"
                                ? std::max<int64_t>(1, count / c.size()) * c.size() * 4
                                : count * 4;
      const double algbw = double(sized) / t / 1e9;
      if (op == "all_reduce" && sized >= links_bytes)
        links_bytes = sized, links_busbw = algbw * bus_factor(op, c.size());
      if (op == "all_to_all" && sized >= a2a_bytes) a2a_bytes = sized, a2a_busbw = algbw * bus_factor(op, c.size());
      if (on_row) on_row({op, sized, t, algbw, algbw * bus_factor(op, c.size()), wrong});
    }
  }
  TRIPOD_CHECK(total_wrong == 0, "bench comm: {} wrong elements in the data checks", total_wrong);
  if (!links) return;
  // Whether the group leaves a node: nodes hold LOCAL_WORLD_SIZE consecutive ranks.
  const double node = double(global_rank / std::max(1, local_world_size));
  const double hi = world_reduce(c, bufs, node, comm::ReduceOp::Max);
  const double lo = -world_reduce(c, bufs, -node, comm::ReduceOp::Max);
  *links = {links_bytes, links_busbw, hi != lo, a2a_bytes, a2a_busbw};
}

}  // namespace tripod::doctor
