// `tripod bench cp` (cli/bench_cp.h): one layer's attention core under
// context parallelism, timed per exchange, with the ring's overlap measured
// against the same ring serialized.
#include "cli/bench_cp.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <vector>

#include "backend/ops.h"
#include "base/error.h"
#include "base/timer.h"
#include "cli/device.h"
#include "comm/context.h"
#include "model/context_parallel.h"
#include "parallel/groups.h"

namespace tripod::cli {
namespace {

struct Row {
  std::string name, note;
  double ms = 0;      // the slowest rank's median
  bool compute = true;  // counts the attention FLOPs (false: the passes alone)
};

class CpBench {
 public:
  CpBench(const CpBenchArgs& a, backend::Backend& be, const parallel::ProcessGroups& pg)
      : a_(a), be_(be), pg_(pg), P_(pg.cp->size()), r_(pg.cp->rank()), B_(a.micro_batch_size),
        Tl_(a.seq_length / P_), NH_(a.num_attention_heads), G_(a.num_query_groups), HS_(a.kv_channels) {
    const bool cuda = be.device().type == DeviceType::CUDA;
    const std::string dt = a.dtype.empty() ? (cuda ? "bf16" : "fp32") : a.dtype;
    TRIPOD_CHECK_HINT(dt == "bf16" || dt == "fp32", "pass --dtype bf16 or fp32", "--dtype {}: unknown", dt);
    act_ = dt == "bf16" ? DType::BF16 : DType::F32;
    dtype_name_ = dt;
    const int64_t W = (NH_ + 2 * G_) * HS_;
    qkv0_ = random({B_, Tl_, W}, 1);
    dout_ = random({B_, Tl_, NH_ * HS_}, 2);
    qkv_ = be.empty(qkv0_.shape(), act_);
    out_ = be.empty({B_, Tl_, NH_ * HS_}, act_);
    lse_ = be.empty({B_, NH_, Tl_}, DType::F32);
    dqkv_ = be.empty(qkv0_.shape(), act_);
    for (Tensor* k : {&ring_.kv[0], &ring_.kv[1], &ring_.dkv[0], &ring_.dkv[1], &ring_.dkv_block})
      *k = be.empty({B_, Tl_, 2 * G_ * HS_}, act_);
    be.copy(qkv_, qkv0_);
  }

  std::string dtype_name() const { return dtype_name_; }

  // The attention FLOPs of one rank's forward + backward: the causal
  // forward is 2 B NH HS T^2 over the cp ranks (QK^T and PV, half the
  // square), the backward 2.5 times that (FlashAttention's count).
  double flops() const {
    const double T = static_cast<double>(a_.seq_length);
    return 3.5 * 2.0 * static_cast<double>(B_ * NH_ * HS_) * T * T / P_;
  }

  std::vector<Row> run(const std::vector<std::string>& types) {
    std::vector<Row> rows;
    for (const std::string& t : types) {
      if (t == "p2p") ring_rows(rows);
      else if (t == "a2a") rows.push_back(a2a_row());
      else if (t == "all_gather") rows.push_back(all_gather_row());
      else
        TRIPOD_CHECK_HINT(false, "pass --cp-comm-type as a comma-separated list of p2p, a2a, all_gather",
                          "--cp-comm-type {}: unknown", t);
    }
    return rows;
  }

  int64_t ring_mismatches() const { return mismatches_; }

 private:
  Tensor random(const Shape& shape, unsigned salt) {
    Tensor h = Tensor::empty(shape, DType::F32);
    std::mt19937 g(1000u * salt + static_cast<unsigned>(pg_.global_rank));
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (int64_t i = 0; i < h.numel(); ++i) h.data<float>()[i] = u(g);
    Tensor d32 = be_.empty(shape, DType::F32);
    be_.copy(d32, h);
    if (act_ == DType::F32) return d32;
    Tensor d = be_.empty(shape, act_);
    be_.cast(d, d32);
    return d;
  }

  // The slowest rank's median over --iters after --warmup-iters; every
  // iteration starts together (barrier) and ends on the device.
  double time(const std::function<void()>& prepare, const std::function<void()>& body) {
    std::vector<double> ms;
    for (int i = 0; i < a_.warmup + a_.iters; ++i) {
      prepare();
      be_.synchronize();
      pg_.world->barrier();
      Timer t;
      body();
      be_.synchronize();
      if (i >= a_.warmup) ms.push_back(t.millis());
    }
    std::sort(ms.begin(), ms.end());
    Tensor h = Tensor::empty({1}, DType::F32), d = be_.empty({1}, DType::F32);
    h.data<float>()[0] = static_cast<float>(ms[ms.size() / 2]);
    be_.copy(d, h);
    pg_.world->all_reduce(d, {comm::ReduceOp::Max})->wait();
    be_.copy(h, d);
    be_.synchronize();
    return h.data<float>()[0];
  }

  int64_t sum_over_ranks(int64_t n) {
    Tensor h = Tensor::empty({1}, DType::F32), d = be_.empty({1}, DType::F32);
    h.data<float>()[0] = static_cast<float>(n);
    be_.copy(d, h);
    pg_.world->all_reduce(d)->wait();
    be_.copy(h, d);
    be_.synchronize();
    return static_cast<int64_t>(h.data<float>()[0]);
  }

  std::vector<uint8_t> bytes(const Tensor& t) {
    Tensor h = Tensor::empty(t.shape(), t.dtype());
    be_.copy(h, t);
    be_.synchronize();
    const auto* p = static_cast<const uint8_t*>(h.raw());
    return {p, p + h.numel() * static_cast<int64_t>(dtype_size(h.dtype()))};
  }

  // Elements of `got` that differ from `want` in any byte.
  int64_t differing(const std::vector<uint8_t>& want, const std::vector<uint8_t>& got, size_t elem) {
    int64_t n = 0;
    for (size_t i = 0; i < want.size(); i += elem) n += std::memcmp(&want[i], &got[i], elem) != 0;
    return n;
  }

  void ring_rows(std::vector<Row>& rows) {
    model::RingAttention ring(*pg_.cp, be_, static_cast<int>(NH_), static_cast<int>(G_));
    auto nothing = [] {};
    auto fwd_bwd = [&] {
      ring.forward(out_, lse_, qkv_, ring_);
      ring.backward(dqkv_, dout_, qkv_, out_, lse_, ring_);
    };
    ring.set_overlap(false);
    rows.push_back({"p2p serialized", "each K/V (and dK/dV) pass waited for before the block's attention",
                    time(nothing, fwd_bwd)});
    const auto out_s = bytes(out_), dqkv_s = bytes(dqkv_);
    ring.set_overlap(true);
    const double overlapped = time(nothing, fwd_bwd);
    const size_t elem = dtype_size(act_);
    mismatches_ = sum_over_ranks(differing(out_s, bytes(out_), elem) + differing(dqkv_s, bytes(dqkv_), elem));
    rows.insert(rows.end() - 1, {"p2p", "the ring: the next pass in flight during the block's attention", overlapped});
    // The same cp blocks' attention with no passes (the K/V in hand each time).
    const int P = static_cast<int>(P_), r = static_cast<int>(r_);
    auto blocks = [&] {
      be_.attention_kv_copy(ring_.kv[0], qkv_, static_cast<int>(NH_), static_cast<int>(G_));
      for (int i = 0; i < P; ++i)
        be_.attention_block_forward(out_, lse_, qkv_, ring_.kv[0], static_cast<int>(NH_), static_cast<int>(G_),
                                    model::ring_block(r, P, i, Tl_), i > 0);
      be_.zero(dqkv_);
      for (int i = 0; i < P; ++i) {
        be_.zero(ring_.dkv_block);
        be_.attention_block_backward(dqkv_, ring_.dkv_block, dout_, qkv_, ring_.kv[0], out_, lse_,
                                     static_cast<int>(NH_), static_cast<int>(G_), model::ring_block(r, P, i, Tl_));
      }
    };
    rows.push_back({"p2p compute only", "the ring's block attention without its passes", time(nothing, blocks)});
    // The passes alone: cp-1 K/V hops forward, cp-1 K/V and cp dK/dV hops backward.
    comm::Communicator& cp = *pg_.cp;
    auto pass = [&](Tensor& send, Tensor& recv, int tag) {
      be_.synchronize();
      std::shared_ptr<comm::Work> s, q;
      if (r % 2 == 0) {
        s = cp.send(send, (r + 1) % P, {tag});
        q = cp.recv(recv, (r + P - 1) % P, {tag});
      } else {
        q = cp.recv(recv, (r + P - 1) % P, {tag});
        s = cp.send(send, (r + 1) % P, {tag});
      }
      s->wait();
      q->wait();
    };
    auto passes = [&] {
      if (P == 1) return;
      for (int i = 0; i + 1 < 2 * P - 1; ++i) pass(ring_.kv[i % 2], ring_.kv[1 - i % 2], model::kCpKvTag);
      for (int i = 0; i < P; ++i) pass(ring_.dkv[i % 2], ring_.dkv[1 - i % 2], model::kCpDkvTag);
    };
    Row only{"p2p passes only", "the ring's send/recv without the attention", time(nothing, passes)};
    only.compute = false;
    rows.push_back(only);
  }

  Row a2a_row() {
    TRIPOD_CHECK_HINT(NH_ % P_ == 0 && G_ % P_ == 0,
                      "choose --num-attention-heads and --num-query-groups divisible by the cp size, or leave a2a "
                      "out of --cp-comm-type",
                      "--cp-comm-type a2a splits the heads over the {} cp ranks: {} heads and {} query groups do not "
                      "divide",
                      P_, NH_, G_);
    model::A2aBuffers buf;
    const int64_t W = (NH_ + 2 * G_) * HS_;
    buf.send = be_.empty({B_ * Tl_ * W}, act_);
    buf.recv = be_.empty({B_ * Tl_ * W}, act_);
    buf.att_h = be_.empty({B_, Tl_ * P_, NH_ / P_ * HS_}, act_);
    buf.datt_h = be_.empty({B_, Tl_ * P_, NH_ / P_ * HS_}, act_);
    const model::CpChunks chunks{static_cast<int>(P_), static_cast<int>(r_), a_.seq_length};
    buf.qkv = model::HeadExchange::make(be_, chunks, B_, {NH_, G_, G_});
    buf.out = model::HeadExchange::make(be_, chunks, B_, {NH_});
    const model::UlyssesAttention a2a(*pg_.cp, be_, static_cast<int>(NH_), static_cast<int>(G_));
    const double ms = time([&] { be_.copy(qkv_, qkv0_); },  // forward leaves qkv in the head split
                           [&] {
                             a2a.forward(out_, lse_, qkv_, true, buf);
                             a2a.backward(dqkv_, dout_, qkv_, out_, lse_, buf);
                           });
    be_.copy(qkv_, qkv0_);
    return {"a2a", "heads for sequence: all-to-all of qkv and out forward, out, dout and dqkv backward", ms};
  }

  Row all_gather_row() {
    model::AllGatherBuffers buf;
    const int64_t KV = 2 * G_ * HS_;
    buf.kv = be_.empty({B_, Tl_, KV}, act_);
    buf.dkv = be_.empty({B_, Tl_, KV}, act_);
    buf.kv_all = be_.empty({P_ * B_ * Tl_ * KV}, act_);
    buf.dkv_all = be_.empty({P_ * B_ * Tl_ * KV}, act_);
    const model::AllGatherAttention ag(*pg_.cp, be_, static_cast<int>(NH_), static_cast<int>(G_));
    const double ms = time([] {},
                           [&] {
                             ag.forward(out_, lse_, qkv_, buf);
                             ag.backward(dqkv_, dout_, qkv_, out_, lse_, buf);
                           });
    return {"all_gather", "K/V all-gathered, dK/dV reduce-scattered, no overlap", ms};
  }

  const CpBenchArgs& a_;
  backend::Backend& be_;
  const parallel::ProcessGroups& pg_;
  int64_t P_, r_, B_, Tl_, NH_, G_, HS_;
  DType act_ = DType::F32;
  std::string dtype_name_;
  Tensor qkv0_, qkv_, dout_, out_, lse_, dqkv_;
  model::RingBuffers ring_;
  int64_t mismatches_ = 0;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');)
    if (!t.empty()) out.push_back(t);
  return out;
}

}  // namespace

void add_cp_bench_options(CLI::App& sub, CpBenchArgs& a) {
  sub.add_option("--seq-length", a.seq_length, "the whole sequence (each cp rank holds seq-length / cp)")
      ->capture_default_str();
  sub.add_option("--micro-batch-size", a.micro_batch_size)->capture_default_str();
  sub.add_option("--num-attention-heads", a.num_attention_heads)->capture_default_str();
  sub.add_option("--num-query-groups", a.num_query_groups, "K/V heads (GQA)")->capture_default_str();
  sub.add_option("--kv-channels", a.kv_channels, "head size")->capture_default_str();
  sub.add_option("--cp-comm-type", a.comm_types, "comma-separated: p2p (timed overlapped and serialized), a2a, "
                                                 "all_gather")
      ->capture_default_str();
  sub.add_option("--dtype", a.dtype, "bf16 | fp32 (default: bf16 on cuda, fp32 on cpu)");
  sub.add_option("--iters", a.iters)->capture_default_str();
  sub.add_option("--warmup-iters", a.warmup)->capture_default_str();
  sub.add_option("--device", a.device, "cpu (Gloo) or cuda (NCCL, one GPU per rank)")->capture_default_str();
  sub.add_option("--distributed-backend", a.backend,
                 "nccl (cuda default) | gloo (cuda: staged through host memory; ranks may share a GPU)");
  sub.add_option("--distributed-timeout-minutes", a.timeout_minutes, "every wait's timeout (fractions allowed)")
      ->capture_default_str();
}

int run_cp_bench(const CpBenchArgs& a) {
  TRIPOD_CHECK_HINT(a.iters >= 1 && a.warmup >= 0, "pass --iters 1 or more and --warmup-iters 0 or more",
                    "--iters {} / --warmup-iters {}", a.iters, a.warmup);
  TRIPOD_CHECK_HINT(a.num_query_groups >= 1 && a.num_attention_heads % a.num_query_groups == 0,
                    "choose --num-query-groups dividing --num-attention-heads",
                    "--num-attention-heads {} is not a multiple of --num-query-groups {}", a.num_attention_heads,
                    a.num_query_groups);
  const comm::RankInfo info = comm::resolve_rank_info();
  model::check_context_parallel_seq_length(a.seq_length, info.world_size);
  const comm::CommBackend backend = comm_backend_for(a.device, a.backend);
  std::unique_ptr<backend::Backend> be = make_backend(a.device, info, backend);
  // Overlapped and serialized rings are checked byte for byte: the block
  // attention's sums must not depend on timing (cuDNN's atomic dQ does).
  be->set_deterministic(true);
  auto ctx = comm::DistContext::init(info, be->device().type,
                                     std::chrono::milliseconds(int64_t(a.timeout_minutes * 60e3)), backend);
  if (be->device().type == DeviceType::CUDA) ctx->set_device_stream(be->native_stream());
  const int cp = ctx->world_size();
  auto pg = parallel::make_process_groups(*ctx, parallel::Layout::make(cp, 1, 1, 1, cp));
  CpBench bench(a, *be, pg);
  const std::vector<Row> rows = bench.run(split_list(a.comm_types));
  if (pg.global_rank != 0) return 0;
  std::printf("# tripod bench cp: cp %d, seq %lld (%lld per rank), micro-batch %lld, %d heads, %d query groups, "
              "head size %d, %s on %s via %s; attention forward + backward, the slowest rank's median of %d after "
              "%d warm-up\n",
              cp, (long long)a.seq_length, (long long)(a.seq_length / cp), (long long)a.micro_batch_size,
              a.num_attention_heads, a.num_query_groups, a.kv_channels, bench.dtype_name().c_str(), a.device.c_str(),
              comm::comm_backend_name(be->device().type, backend).c_str(), a.iters, a.warmup);
  std::printf("# %-18s %12s %14s  %s\n", "cp-comm-type", "time(ms)", "TFLOP/s/rank", "what");
  double ring = 0, serial = 0, compute = 0, passes = 0;
  for (const Row& r : rows) {
    const std::string tf = r.compute ? fmt::format("{:.4g}", bench.flops() / (r.ms * 1e-3) / 1e12) : "-";
    std::printf("  %-18s %12.3f %14s  %s\n", r.name.c_str(), r.ms, tf.c_str(), r.note.c_str());
    if (r.name == "p2p") ring = r.ms;
    if (r.name == "p2p serialized") serial = r.ms;
    if (r.name == "p2p compute only") compute = r.ms;
    if (r.name == "p2p passes only") passes = r.ms;
  }
  if (serial > 0 && cp > 1)
    std::printf("# overlap saved %.3f ms of the %.3f ms the passes take alone (serialized %.3f ms, overlapped %.3f "
                "ms, block attention alone %.3f ms); overlapped and serialized give the same out and dqkv: %s\n",
                serial - ring, passes, serial, ring, compute,
                bench.ring_mismatches() == 0 ? "yes"
                                             : fmt::format("no, {} elements differ", bench.ring_mismatches()).c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace tripod::cli
