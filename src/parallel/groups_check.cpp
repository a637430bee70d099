// Implementation of parallel/groups_check.h. Values are small integers held
// in f32 (exact), so every expected result is exact.
#include "parallel/groups_check.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.h"
#include "tensor/tensor.h"

namespace tripod::parallel {

namespace {

using comm::Communicator;

struct Group {
  const char* name;
  Communicator* comm;
  std::vector<int> members;  // global ranks in group-rank order
};

const std::vector<int>* find_members(const RankGroups& groups, int global) {
  for (const auto& g : groups)
    if (std::find(g.begin(), g.end(), global) != g.end()) return &g;
  return nullptr;
}

void expect(const char* group, const char* op, int64_t n, int64_t i, double want, double got) {
  TRIPOD_CHECK(want == got, "collective check: group {} op {} ({} elements): element {} is {}, expected {}",
               group, op, n, i, got, want);
}

// A host buffer and, under a CheckDevice, its device twin: the collective
// runs on on(); put() copies the host values there, get() brings them back.
struct Buf {
  Tensor host, dev;
  const CheckDevice* d;
  Buf(int64_t n, const CheckDevice* dv) : host(Tensor::empty({n}, DType::F32)), d(dv) {
    if (d) dev = Tensor::empty({n}, DType::F32, d->device);
  }
  float* f() { return host.data<float>(); }
  Tensor& on() { return d ? dev : host; }
  void put() {
    if (d) d->copy(dev, host);
  }
  void get() {
    if (!d) return;
    d->copy(host, dev);
    d->sync();
  }
};

void check_group(const Group& g, int me, int64_t n, GroupCheckReport& rep, const CheckDevice* dev) {
  Communicator& c = *g.comm;
  const int size = c.size(), gr = c.rank();
  TRIPOD_CHECK(size == int(g.members.size()) && g.members[size_t(gr)] == me,
               "group {}: communicator says rank {} of {}, the layout says global rank {} of {}",
               g.name, gr, size, me, g.members.size());

  // all_reduce sum: t[i] = (rank+1) * (i%7+1)  ->  (i%7+1) * sum(rank+1)
  Buf t(n, dev);
  for (int64_t i = 0; i < n; ++i) t.f()[i] = float((me + 1) * (i % 7 + 1));
  t.put();
  c.all_reduce(t.on(), {comm::ReduceOp::Sum})->wait();
  t.get();
  double rank_sum = 0;
  for (int r : g.members) rank_sum += r + 1;
  for (int64_t i = 0; i < n; ++i) expect(g.name, "all_reduce(sum)", n, i, rank_sum * double(i % 7 + 1), t.f()[i]);

  // all_reduce max: t[i] = rank * (i%3)  ->  max(rank) * (i%3)
  const int rank_max = *std::max_element(g.members.begin(), g.members.end());
  for (int64_t i = 0; i < n; ++i) t.f()[i] = float(me * (i % 3));
  t.put();
  c.all_reduce(t.on(), {comm::ReduceOp::Max})->wait();
  t.get();
  for (int64_t i = 0; i < n; ++i) expect(g.name, "all_reduce(max)", n, i, double(rank_max * (i % 3)), t.f()[i]);

  // all_gather of m = ceil(n/size) per rank: in[i] = rank*1000 + i%1000
  const int64_t m = std::max<int64_t>(1, (n + size - 1) / size);
  Buf in(m, dev), out(m * size, dev);
  for (int64_t i = 0; i < m; ++i) in.f()[i] = float(me * 1000 + i % 1000);
  in.put();
  c.all_gather(out.on(), in.on())->wait();
  out.get();
  for (int k = 0; k < size; ++k)
    for (int64_t i = 0; i < m; ++i)
      expect(g.name, "all_gather", m, k * m + i, double(g.members[size_t(k)] * 1000 + i % 1000),
             out.f()[k * m + i]);

  // reduce_scatter: in[j] = (rank+1) * (j%13+1); this rank gets chunk gr.
  for (int64_t j = 0; j < m * size; ++j) out.f()[j] = float((me + 1) * (j % 13 + 1));
  out.put();
  c.reduce_scatter(in.on(), out.on())->wait();
  in.get();
  for (int64_t i = 0; i < m; ++i)
    expect(g.name, "reduce_scatter", m, i, rank_sum * double((gr * m + i) % 13 + 1), in.f()[i]);

  // broadcast from the last group rank.
  const int root = size - 1;
  for (int64_t i = 0; i < n; ++i) t.f()[i] = gr == root ? float(me * 1000 + i % 1000) : -1.0f;
  t.put();
  c.broadcast(t.on(), {root})->wait();
  t.get();
  for (int64_t i = 0; i < n; ++i)
    expect(g.name, "broadcast", n, i, double(g.members[size_t(root)] * 1000 + i % 1000), t.f()[i]);
  rep.ops_checked += 5;

  if (size > 1) {
    // send to the next group rank, recv from the previous (both in flight).
    const int next = (gr + 1) % size, prev = (gr + size - 1) % size;
    for (int64_t i = 0; i < n; ++i) t.f()[i] = float(me * 1000 + i % 1000);
    t.put();
    Buf r(n, dev);
    auto rw = c.recv(r.on(), prev, {7});
    auto sw = c.send(t.on(), next, {7});
    sw->wait();
    rw->wait();
    r.get();
    for (int64_t i = 0; i < n; ++i)
      expect(g.name, "send/recv", n, i, double(g.members[size_t(prev)] * 1000 + i % 1000), r.f()[i]);
    rep.ops_checked += 1;
  }
  c.barrier();
  rep.ops_checked += 1;
  rep.bytes_checked += 4 * (3 * n + 2 * m * size);
}

}  // namespace

std::vector<int64_t> default_check_sizes() {
  return {1, 2, 3, 7, 64, 1023, 4097, 65539, 1500001};
}

GroupCheckReport check_process_groups(const ProcessGroups& pg, const std::vector<int64_t>& sizes,
                                      const CheckDevice* dev) {
  const Layout& l = pg.layout;
  const int me = pg.global_rank;
  std::vector<int> world(static_cast<size_t>(l.world_size));
  for (int r = 0; r < l.world_size; ++r) world[size_t(r)] = r;
  std::vector<Group> groups = {{"world", pg.world.get(), world},
                               {"tp", pg.tp.get(), *find_members(l.tp_groups(), me)},
                               {"dp", pg.dp.get(), *find_members(l.dp_groups(), me)},
                               {"pp", pg.pp.get(), *find_members(l.pp_groups(), me)},
                               {"mp", pg.mp.get(), *find_members(l.mp_groups(), me)}};
  const RankGroups embd = l.embd_groups();
  if (const auto* e = find_members(embd, me)) {
    TRIPOD_CHECK(pg.embd, "global rank {} is in embedding group but has no embd communicator", me);
    groups.push_back({"embd", pg.embd.get(), *e});
  } else {
    TRIPOD_CHECK(!pg.embd, "global rank {} is a middle stage but has an embd communicator", me);
  }
  GroupCheckReport rep;
  // Groups in the same order on every rank; each group's ops are matched
  // only among its members, so ranks of other groups need not wait.
  for (const auto& g : groups) {
    TRIPOD_CHECK(g.comm, "global rank {}: group {} is missing", me, g.name);
    for (int64_t n : sizes) check_group(g, me, n, rep, dev);
    ++rep.groups_checked;
  }
  pg.world->barrier();
  return rep;
}

}  // namespace tripod::parallel
