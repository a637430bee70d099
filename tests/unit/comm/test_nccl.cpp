// NCCL communicator on real GPUs (label gpu; skipped with fewer than 2):
// threads as ranks, one GPU each, every collective (and all_to_all_v) with analytic values,
// then a timeout that must end (abort) instead of hanging.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <thread>
#include <vector>

#include "base/error.h"
#include "comm/context.h"

using namespace tripod;
using namespace std::chrono_literals;

static int gpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// f32 buffer on `dev` holding `host`.
static Tensor on_gpu(int dev, const std::vector<float>& host) {
  cudaSetDevice(dev);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * 4), cudaSuccess);
  cudaMemcpy(p, host.data(), host.size() * 4, cudaMemcpyHostToDevice);
  return Tensor::wrap(p, {int64_t(host.size())}, DType::F32, Device::cuda(dev));
}
static std::vector<float> to_host(const Tensor& t) {
  std::vector<float> h(size_t(t.numel()));
  cudaMemcpy(h.data(), t.raw(), h.size() * 4, cudaMemcpyDeviceToHost);
  return h;
}

TEST(Nccl, CollectivesAndTimeout) {
  const int n = std::min(gpus(), 4);
  if (n < 2) GTEST_SKIP() << "needs 2 or more GPUs";
  ASSERT_TRUE(comm::has_comm_factory(DeviceType::CUDA));
  auto store = std::make_shared<comm::HashStore>(30s);
  std::vector<std::thread> ts;
  std::vector<std::string> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        cudaSetDevice(r);
        auto ctx = comm::DistContext::init_with_store(r, n, store, DeviceType::CUDA, 30s, r);
        auto w = ctx->world();
        const int64_t m = 1000003;
        Tensor t = on_gpu(r, std::vector<float>(size_t(m), float(r + 1)));
        w->all_reduce(t)->wait();
        if (to_host(t)[size_t(m - 1)] != float(n * (n + 1) / 2)) throw Error("all_reduce value");
        Tensor in = on_gpu(r, std::vector<float>(3, float(r))), out = on_gpu(r, std::vector<float>(size_t(3 * n), -1));
        w->all_gather(out, in)->wait();
        if (to_host(out)[size_t(3 * n - 1)] != float(n - 1)) throw Error("all_gather value");
        w->reduce_scatter(in, out)->wait();  // out = [0,0,0,1,1,1,...] summed n times
        if (to_host(in)[0] != float(n * r)) throw Error("reduce_scatter value");
        Tensor b = on_gpu(r, std::vector<float>(5, r == 0 ? 7.0f : 0.0f));
        w->broadcast(b, {0})->wait();
        if (to_host(b)[4] != 7.0f) throw Error("broadcast value");
        Tensor s = on_gpu(r, std::vector<float>(4, float(r))), q = on_gpu(r, std::vector<float>(4, -1));
        auto rw = w->recv(q, (r + n - 1) % n);
        auto sw = w->send(s, (r + 1) % n);
        sw->wait();
        rw->wait();
        if (to_host(q)[0] != float((r + n - 1) % n)) throw Error("send/recv value");
        // all_to_all_v (one NCCL group): rank r sends peer p a chunk of
        // (r + p + 1) * 40000 floats (large enough to need both sides in
        // flight), valued 1000 r + p; none to itself (the caller's chunk).
        {
          std::vector<int64_t> sc(static_cast<size_t>(n)), rc(static_cast<size_t>(n));
          int64_t nr = 0;
          for (int p = 0; p < n; ++p) {
            sc[size_t(p)] = p == r ? 0 : int64_t(r + p + 1) * 40000;
            rc[size_t(p)] = p == r ? 0 : int64_t(p + r + 1) * 40000;
            nr += rc[size_t(p)];
          }
          std::vector<float> hin;
          for (int p = 0; p < n; ++p) hin.insert(hin.end(), size_t(sc[size_t(p)]), float(1000 * r + p));
          Tensor ain = on_gpu(r, hin), aout = on_gpu(r, std::vector<float>(size_t(nr), -1));
          w->all_to_all_v(aout, ain, sc, rc)->wait();
          const std::vector<float> got = to_host(aout);
          size_t at = 0;
          for (int p = 0; p < n; ++p)
            for (int64_t i = 0; i < rc[size_t(p)]; ++i, ++at)
              if (got[at] != float(1000 * p + r)) throw Error("all_to_all_v value");
        }
        w->barrier();
        // Rank 0 waits for a message nobody sends: must time out, not hang.
        if (r == 0) {
          auto t0 = std::chrono::steady_clock::now();
          try {
            w->recv(q, 1, {0, 1500ms})->wait();
            throw Error("recv without a sender completed");
          } catch (const TimeoutError& e) {
            const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (sec > 10) throw Error("timeout took too long");
          }
        }
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
}

// One GPU is enough for the mechanics: a one-rank NCCL communicator made
// through the factory runs the non-blocking init, enqueue, settle, event
// wait and finalize paths with exact results.
TEST(Nccl, OneRankCommunicatorOnOneGpu) {
  if (gpus() < 1) GTEST_SKIP() << "needs a GPU";
  auto store = std::make_shared<comm::HashStore>(30s);
  comm::GroupSpec spec;
  spec.name = "solo";
  spec.global_ranks = {0};
  comm::CommConfig cfg;
  cfg.timeout = 20s;
  cfg.recorder = std::make_shared<comm::FlightRecorder>();
  auto c = comm::make_device_communicator(DeviceType::CUDA, spec, store, cfg);
  ASSERT_EQ(c->size(), 1);
  Tensor t = on_gpu(0, std::vector<float>(4097, 3.0f));
  c->all_reduce(t)->wait();
  c->all_reduce(t, {comm::ReduceOp::Max})->wait();
  EXPECT_EQ(to_host(t)[4096], 3.0f);
  Tensor out = on_gpu(0, std::vector<float>(4097, 0.0f));
  c->all_gather(out, t)->wait();
  EXPECT_EQ(to_host(out)[17], 3.0f);
  Tensor small = on_gpu(0, std::vector<float>(4097, 0.0f));
  c->reduce_scatter(small, out)->wait();
  EXPECT_EQ(to_host(small)[4096], 3.0f);
  c->broadcast(t, {0})->wait();
  c->barrier();
  auto w = c->all_reduce(t);
  w->wait();
  EXPECT_TRUE(w->is_completed());
  auto entries = cfg.recorder->entries();
  ASSERT_EQ(entries.size(), 7u);  // 5 ops, barrier, the last all_reduce
  for (const auto& e : entries) EXPECT_EQ(e.state, comm::OpState::Completed) << e.op;
  Tensor host = Tensor::zeros({4}, DType::F32);
  EXPECT_THROW(c->all_reduce(host), Error);  // host tensors are refused by name
}
