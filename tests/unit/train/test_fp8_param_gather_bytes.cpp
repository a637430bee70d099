// --fp8-param-gather through the real training path (train::Trainer on 2
// threads-as-ranks with the distributed optimizer, NOTE [FP8 parameter
// all-gather]): a counting decorator on the dp group adds up the bytes each
// rank puts into the parameter all-gathers of one training step, by dtype
// (the FP8 codes move as U8 bytes).
//  - without the flag: 4 bytes (f32) per element of this rank's pieces, the
//    whole padded buffer over dp;
//  - with it: the FP8 weights (qkv, proj, fc1, fc2 of every layer, counted
//    here from the model's shapes) move as E4M3 codes, 1 byte (U8) per element
//    of this rank's parts, and the f32 gather carries only the others.
// GPT, 2 layers, hidden 32, ffn 128: per layer qkv 96x32, proj 32x32, fc1
// 128x32, fc2 32x128 = 12 x 32^2 = 12288 FP8 weight elements, 24576 in all.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <memory>

#include "backend/cpu/cpu_backend.h"
#include "comm/communicator.h"
#include "parallel/groups.h"
#include "testing/threads_as_ranks.h"
#include "train/trainer.h"

namespace tripod {
namespace {

// Forwards every call; adds the bytes of each all_gather's input by dtype.
class CountingCommunicator : public comm::Communicator {
 public:
  explicit CountingCommunicator(std::shared_ptr<comm::Communicator> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  std::shared_ptr<comm::Work> all_reduce(Tensor& t, const comm::AllReduceOptions& o) override {
    return inner_->all_reduce(t, o);
  }
  std::shared_ptr<comm::Work> all_gather(Tensor& out, const Tensor& in, const comm::AllGatherOptions& o) override {
    gathered[in.dtype()] += static_cast<int64_t>(in.nbytes());
    return inner_->all_gather(out, in, o);
  }
  std::shared_ptr<comm::Work> reduce_scatter(Tensor& out, const Tensor& in,
                                             const comm::ReduceScatterOptions& o) override {
    return inner_->reduce_scatter(out, in, o);
  }
  std::shared_ptr<comm::Work> broadcast(Tensor& t, const comm::BroadcastOptions& o) override {
    return inner_->broadcast(t, o);
  }
  std::shared_ptr<comm::Work> send(const Tensor& t, int dst, const comm::SendOptions& o) override {
    return inner_->send(t, dst, o);
  }
  std::shared_ptr<comm::Work> recv(Tensor& t, int src, const comm::RecvOptions& o) override {
    return inner_->recv(t, src, o);
  }
  void barrier(const comm::BarrierOptions& o) override { inner_->barrier(o); }
  std::shared_ptr<comm::Work> all_to_all_v(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_counts,
                                           const std::vector<int64_t>& recv_counts,
                                           const comm::AllToAllOptions& o) override {
    return inner_->all_to_all_v(out, in, send_counts, recv_counts, o);
  }
  void abort() noexcept override { inner_->abort(); }

  std::map<DType, int64_t> gathered;

 private:
  std::shared_ptr<comm::Communicator> inner_;
};

train::TrainArgs args(bool param_gather) {
  train::TrainArgs a;
  a.model.num_layers = 2;
  a.model.hidden_size = 32;
  a.model.num_attention_heads = 4;
  a.model.seq_length = 16;
  a.model.vocab_size = 64;
  a.data.mock_data = true;
  a.batch.micro_batch_size = 2;
  a.batch.global_batch_size = 4;
  a.batch.train_iters = 3;
  a.logging.eval_interval = 0;
  a.optimizer.lr.max_lr = 1e-3;
  a.parallel.ddp.use_distributed_optimizer = true;
  a.precision.fp8_format = "hybrid";
  a.precision.fp8_recipe = "tensorwise";
  a.model.fp8.param_gather = param_gather;
  return a;
}

// Per rank: the {f32, FP8 code (U8)} bytes put into the dp all-gathers in one step
// (the second), and the {f32, FP8 code} bytes the hand count expects with the
// flag: per bucket of the buffer, split in 2 pieces of piece_len, the FP8
// weights' elements in each rank's piece and the other parameters'
// elements; an all-gather moves equal sizes, so each rank sends the longer
// rank's count: code bytes = max over ranks of its FP8 elements, f32 bytes
// = 4 x max over ranks of its other elements (a bucket without FP8
// weights, or where that max is over half a piece: 4 x piece_len, as
// without the flag).
struct Bytes {
  std::array<int64_t, 2> got{}, want{};
  int64_t want_plain = 0;  // without the flag: 4 x piece_len per bucket
  int64_t fp8_elems = 0;
};

bool is_fp8_weight(const std::string& n) {
  return n.ends_with("linear_qkv.weight") || n.ends_with("linear_proj.weight") ||
         n.ends_with("linear_fc1.weight") || n.ends_with("linear_fc2.weight");
}

std::vector<Bytes> step_bytes(bool param_gather) {
  using namespace std::chrono_literals;
  std::vector<Bytes> out(2);
  testing::run_ranks(2, 60s, [&](int rank, comm::DistContext& ctx) {
    auto be = backend::make_cpu_backend();
    auto groups = parallel::make_process_groups(ctx, parallel::Layout::make(2, 1, 1, 1, 1));
    auto counting = std::make_shared<CountingCommunicator>(groups.dp);
    groups.dp = counting;
    groups.dp_cp = counting;
    train::Trainer trainer(args(param_gather), *be, &groups);
    trainer.train_step();
    counting->gathered.clear();
    trainer.train_step();
    Bytes& o = out[static_cast<size_t>(rank)];
    o.got = {counting->gathered[DType::F32], counting->gathered[DType::U8]};
    const auto& params = trainer.model().params().params();
    const auto& buf = trainer.ddp().buffer(0);
    for (const auto& p : params)
      if (is_fp8_weight(p.spec.name)) o.fp8_elems += shape_numel(p.shape);
    for (size_t b = 0; b < buf.buckets().size(); ++b) {
      const auto& r = buf.buckets()[b];
      const int64_t plen = buf.piece_len(b);
      o.want_plain += 4 * plen;
      std::array<int64_t, 2> fp8{}, other{};
      for (int q = 0; q < 2; ++q)
        for (int i = r.first_param; i < r.end_param; ++i) {
          const auto& p = params[static_cast<size_t>(i)];
          const int64_t lo = std::max(p.offset, r.begin + q * plen);
          const int64_t hi = std::min(p.offset + shape_numel(p.shape), r.begin + (q + 1) * plen);
          if (hi > lo) (is_fp8_weight(p.spec.name) ? fp8 : other)[static_cast<size_t>(q)] += hi - lo;
        }
      if (fp8[0] + fp8[1] == 0) {
        o.want[0] += 4 * plen;
        continue;
      }
      const int64_t packed = std::max<int64_t>(1, std::max(other[0], other[1]));
      o.want[0] += 2 * packed > plen ? 4 * plen : 4 * packed;  // over half a piece: gathered whole
      o.want[1] += std::max(fp8[0], fp8[1]);
    }
  });
  return out;
}

TEST(Fp8ParamGatherTraining, FP8WeightsMoveOneBytePerElement) {
  const auto plain = step_bytes(false), fp8 = step_bytes(true);
  for (int r = 0; r < 2; ++r) {
    const Bytes& p = plain[static_cast<size_t>(r)];
    const Bytes& f = fp8[static_cast<size_t>(r)];
    EXPECT_EQ(f.fp8_elems, 2 * 12 * 32 * 32);  // qkv, proj, fc1, fc2 of 2 layers, by hand
    EXPECT_EQ(p.got[1], 0) << "rank " << r << ": bytes (U8) gathered without the flag";
    EXPECT_EQ(p.got[0], p.want_plain) << "rank " << r << ": f32 bytes without the flag";
    EXPECT_EQ(f.got[1], f.want[1]) << "rank " << r << ": FP8 code bytes";
    EXPECT_EQ(f.got[0], f.want[0]) << "rank " << r << ": f32 bytes";
    // 1 byte per FP8 weight element, over both ranks: at least all of
    // them, and at most the padding to the longer rank's part more (here
    // the embedding sits in one rank's piece, so about 18%).
    EXPECT_GE(2 * f.got[1], f.fp8_elems) << "rank " << r;
    EXPECT_LE(2 * f.got[1], f.fp8_elems * 5 / 4) << "rank " << r;
    // The FP8 weights left the f32 gather: 4 bytes for each of this rank's
    // share of them less (up to the same padding).
    EXPECT_GE(p.got[0] - f.got[0], 4 * (f.fp8_elems * 3 / 8)) << "rank " << r;
    EXPECT_LT(f.got[0] + f.got[1], p.got[0]) << "rank " << r;
  }
}

}  // namespace
}  // namespace tripod
