// All-reduce bandwidth sweep for `tripod doctor`. See doctor/comm_check.h.
#include "doctor/comm_check.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/timer.h"

namespace tripod::doctor {
namespace {

// A buffer as the communicator sees it (on the device, or the host tensor
// itself) and its host mirror.
struct Buf {
  Tensor host, dev;
};

Buf make_buf(backend::Backend* be, int64_t n) {
  Buf b;
  b.host = Tensor::empty({n}, DType::F32);
  b.dev = be ? be->empty({n}, DType::F32) : b.host;
  return b;
}
void up(backend::Backend* be, Buf& b) {
  if (be) be->copy(b.dev, b.host), be->synchronize();
}
void down(backend::Backend* be, Buf& b) {
  if (be) be->copy(b.host, b.dev), be->synchronize();
}

double reduce_scalar(comm::Communicator& world, backend::Backend* be, double v, comm::ReduceOp op) {
  Buf b = make_buf(be, 1);
  b.host.data<float>()[0] = float(v);
  up(be, b);
  world.all_reduce(b.dev, {op})->wait();
  down(be, b);
  return b.host.data<float>()[0];
}

}  // namespace

std::vector<BandwidthPoint> measure_all_reduce(comm::Communicator& world, backend::Backend* be,
                                               const std::vector<int64_t>& sizes_bytes, int iters) {
  const int n = world.size();
  std::vector<BandwidthPoint> out;
  for (int64_t bytes : sizes_bytes) {
    const int64_t count = std::max<int64_t>(1, bytes / 4);
    Buf t = make_buf(be, count);  // (count,) f32
    // Data check first: every rank holds rank + 1, the sum is n (n + 1) / 2.
    std::fill_n(t.host.data<float>(), count, float(world.rank() + 1));
    up(be, t);
    world.all_reduce(t.dev)->wait();
    down(be, t);
    const float want = float(n * (n + 1) / 2);
    int64_t wrong = std::count_if(t.host.data<float>(), t.host.data<float>() + count,
                                  [&](float x) { return x != want; });
    BandwidthPoint p;
    p.bytes = count * 4;
    p.wrong = int64_t(reduce_scalar(world, be, double(wrong), comm::ReduceOp::Sum));
    world.all_reduce(t.dev)->wait();  // warm-up
    world.barrier();
    Timer timer;
    for (int i = 0; i < iters; ++i) world.all_reduce(t.dev)->wait();
    if (be) be->synchronize();
    p.seconds = reduce_scalar(world, be, timer.seconds() / iters, comm::ReduceOp::Max);
    p.algbw_gbs = double(p.bytes) / p.seconds / 1e9;
    p.busbw_gbs = p.algbw_gbs * 2.0 * (n - 1) / n;
    out.push_back(p);
  }
  return out;
}

CheckResult check_all_reduce(const std::vector<BandwidthPoint>& points, int ranks, const std::string& transport) {
  CheckResult r{"all-reduce-busbw", Status::kPass, "", ""};
  int64_t wrong = 0;
  r.finding = fmt::format("{} ranks over {}:", ranks, transport);
  for (const auto& p : points) {
    wrong += p.wrong;
    r.finding += p.bytes >= (1 << 20) ? fmt::format(" {} MiB {:.2f} GB/s", p.bytes >> 20, p.busbw_gbs)
                                      : fmt::format(" {} KiB {:.2f} GB/s", p.bytes >> 10, p.busbw_gbs);
  }
  r.finding += " (busbw, nccl-tests definition)";
  if (wrong > 0) {
    r.status = Status::kFail;
    r.finding += fmt::format("; {} wrong elements in the data check", wrong);
    r.fix = "a collective returned wrong data: check for mixed library versions across nodes, then run "
            "`tripod bench comm --check` and NCCL_DEBUG=INFO";
  }
  return r;
}

}  // namespace tripod::doctor
