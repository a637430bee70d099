// The loss head in row chunks (model/gpt_model.h, NOTE [Loss head]) on the
// CPU backend: a training micro-batch whose logits go through in chunks of
// 64 rows gives the same per-token losses and parameter gradients as one
// chunk (the word-embedding gradient sums the chunks in another order, so
// within float rounding), the chunk rule is config's (the one `tripod plan`
// uses for memory) at the default 1 GiB, and last_logits() refuses chunked logits.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "base/error.h"
#include "model/gpt_model.h"
#include "config/gpt_config.h"

#include "testing/tiny_model.h"

namespace tripod {
namespace {

constexpr int64_t kB = 4, kT = 48, kL = 2, kC = 32, kNH = 4, kV = 96;  // N 192, Vp 128

struct Result {
  std::vector<float> losses, grads;
  bool logits_refused = false;
};

Result run(int64_t loss_chunk_bytes) {
  auto be = backend::make_cpu_backend();
  const config::GptConfig cfg = testing::tiny_gpt({kL, kC, kNH, kT, kV});
  model::StageConfig st;
  st.loss_chunk_bytes = loss_chunk_bytes;
  model::GptModel m(cfg, st, *be);
  m.params().init(7, 0.02f, kL);
  model::MicroBatchActs a = m.make_acts(kB, kT);
  for (int64_t i = 0; i < kB * kT; ++i) {
    a.tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 37 + 5) % kV);
    a.targets.data<int32_t>()[i] = static_cast<int32_t>((i * 11 + 3) % kV);
  }
  m.params().zero_grad();
  m.forward(a, true, 1.f / (kB * kT), 1);
  m.backward(a, nullptr, 1);
  Result r;
  r.losses.assign(a.losses.data<float>(), a.losses.data<float>() + a.losses.numel());
  const Tensor& g = m.params().grads();
  r.grads.assign(g.data<float>(), g.data<float>() + g.numel());
  try {
    (void)m.last_logits();
  } catch (const Error&) {
    r.logits_refused = true;
  }
  return r;
}

TEST(LossHead, ChunkedRowsGiveTheSameLossesAndGradients) {
  // 64 rows of 128 f32 logits per chunk: N 192 goes in 3 chunks.
  ASSERT_EQ(model::head_chunk_rows(kB * kT, 128, 4, 64 * 128 * 4), 64);
  const Result one = run(0), chunked = run(64 * 128 * 4);
  EXPECT_FALSE(one.logits_refused);
  EXPECT_TRUE(chunked.logits_refused);
  ASSERT_EQ(one.losses.size(), chunked.losses.size());
  for (size_t i = 0; i < one.losses.size(); ++i)
    ASSERT_NEAR(one.losses[i], chunked.losses[i], 1e-6f * std::fabs(one.losses[i])) << "token " << i;
  ASSERT_EQ(one.grads.size(), chunked.grads.size());
  double sq = 0, diff = 0;
  for (size_t i = 0; i < one.grads.size(); ++i) {
    sq += double(one.grads[i]) * one.grads[i];
    diff = std::max(diff, double(std::fabs(one.grads[i] - chunked.grads[i])));
  }
  ASSERT_GT(sq, 0.0);
  EXPECT_LT(diff, 1e-6 * std::sqrt(sq));
}

TEST(LossHead, ChunkRuleMatchesThePlanner) {
  const int64_t gib = int64_t(1) << 30;
  for (int64_t N : {1024, 8192, 16384, 32768, 65536, 65536 + 64, 131072})
    for (int64_t V : {50304, 25152, 12576, 128256, 32000})
      for (int64_t es : {2, 4})
        EXPECT_EQ(model::head_chunk_rows(N, V, es, gib), config::head_chunk_rows(N, V, es))
            << N << " " << V << " " << es;
  // Chunks cover every row: N 65536 of 50304 bf16 logits -> 9408-row chunks (7 of them).
  EXPECT_EQ(model::head_chunk_rows(65536, 50304, 2, gib), 9408);
  EXPECT_EQ(model::head_chunk_rows(100, 50304, 2, 0), 100);
}

}  // namespace
}  // namespace tripod
