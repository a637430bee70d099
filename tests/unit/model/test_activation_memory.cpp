// Activation bytes per rank against Korthikanti et al. 2022 ("Reducing
// Activation Recomputation in Large Transformer Models", eq. 2-4): per layer
//   no parallelism     sbh (34 + 5as/h)
//   tensor parallel    sbh (10 + 24/t + 5as/(ht))
//   + sequence par.    sbh (34/t + 5as/(ht))
// The 5as/h term is the attention score/softmax/dropout-mask storage, which a
// flash-style attention (tripod's, on both backends) never keeps, so the
// comparison uses the formulas without it: the ratio act(t) / act(1) of the
// model's own count must follow the formula's ratio within 10%.
//
// tripod also counts exactly: each stored (N = s b rows) buffer of a layer
// in fp32 is listed in model::MicroBatchActs; the test checks that count.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "base/error.h"
#include "model/gpt_model.h"
#include "testing/tiny_model.h"

namespace tripod {
namespace {

// A tp group of a given size that must never be used for communication:
// building a model and its activation buffers needs none.
class SizeOnlyGroup final : public comm::Communicator {
 public:
  explicit SizeOnlyGroup(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  std::shared_ptr<comm::Work> all_reduce(Tensor&, const comm::AllReduceOptions&) override { return fail(); }
  std::shared_ptr<comm::Work> all_gather(Tensor&, const Tensor&, const comm::AllGatherOptions&) override { return fail(); }
  std::shared_ptr<comm::Work> reduce_scatter(Tensor&, const Tensor&, const comm::ReduceScatterOptions&) override {
    return fail();
  }
  std::shared_ptr<comm::Work> broadcast(Tensor&, const comm::BroadcastOptions&) override { return fail(); }
  std::shared_ptr<comm::Work> send(const Tensor&, int, const comm::SendOptions&) override { return fail(); }
  std::shared_ptr<comm::Work> recv(Tensor&, int, const comm::RecvOptions&) override { return fail(); }
  void barrier(const comm::BarrierOptions&) override { fail(); }
  void abort() noexcept override {}

 private:
  std::shared_ptr<comm::Work> fail() { TRIPOD_FAIL("SizeOnlyGroup: no communication in this test"); }
  int size_;
  std::string name_ = "tp";
};

size_t layer_bytes(int tp, bool sp, int64_t B, int64_t T, const config::GptConfig& cfg,
                   model::Recompute recompute = model::Recompute::None) {
  auto be = backend::make_cpu_backend();
  SizeOnlyGroup group(tp);
  model::StageConfig st;
  st.tp = tp > 1 ? &group : nullptr;
  st.sequence_parallel = sp;
  st.recompute = recompute;
  st.pre_process = false;   // transformer layers only, as the paper's per-layer formula
  st.post_process = false;
  model::GptModel m(cfg, st, *be);
  auto acts = m.make_acts(B, T);
  // The stage's input buffer is not part of any layer.
  return (acts.bytes() - acts.input.nbytes()) / static_cast<size_t>(cfg.num_layers);
}

config::GptConfig config() {
  return testing::tiny_gpt({.num_layers = 2, .hidden_size = 256, .num_attention_heads = 8, .seq_length = 64,
                            .vocab_size = 1000});
}

TEST(ActivationMemory, ExactCountPerLayer) {
  const auto c = config();
  const int64_t B = 2, T = c.seq_length, N = B * T, C = c.hidden_size, NH = c.num_attention_heads;
  for (int tp : {1, 2, 4})
    for (bool sp : {false, true}) {
      const int64_t rows = (sp && tp > 1) ? N / tp : N;  // residual-stream rows held
      // res1, out (rows x C) + 4 LayerNorm stats (rows) + qkv 3C/t, att C/t, fc1 and
      // gelu 4C/t each (N rows) + lse (N x NH/t), all fp32. No LayerNorm outputs
      // (they are workspace: NOTE [LayerNorm outputs]).
      const int64_t floats = 2 * rows * C + 4 * rows + N * (3 * C + C + 8 * C) / tp + N * NH / tp;
      EXPECT_EQ(layer_bytes(tp, sp, B, T, c), static_cast<size_t>(floats * 4)) << "tp " << tp << " sp " << sp;
    }
}

// Korthikanti et al.'s reasoning with tripod's tensors: per token and layer
// 14 C values (res1, out: 2 C on every tp rank; qkv, att, fc1, gelu: 12 C
// split over tp), so tensor parallelism keeps (2 + 12/t)/14 of them and
// sequence parallelism 1/t (the small statistics aside).
TEST(ActivationMemory, DropsAsTheSequenceParallelFormulaPredicts) {
  const auto c = config();
  const double base = static_cast<double>(layer_bytes(1, false, 2, c.seq_length, c));
  for (int t : {2, 4}) {
    const double tp_ratio = static_cast<double>(layer_bytes(t, false, 2, c.seq_length, c)) / base;
    const double sp_ratio = static_cast<double>(layer_bytes(t, true, 2, c.seq_length, c)) / base;
    const double tp_formula = (2.0 + 12.0 / t) / 14.0;
    const double sp_formula = 1.0 / t;
    EXPECT_NEAR(tp_ratio, tp_formula, 0.10 * tp_formula) << "tensor parallel t=" << t;
    EXPECT_NEAR(sp_ratio, sp_formula, 0.10 * sp_formula) << "sequence parallel t=" << t;
  }
}

// NOTE [FP8 SwiGLU cast] (model/transformer_layer.cpp): under delayed
// scaling a Llama layer casts SwiGLU's output inside its kernel and keeps no
// compute-dtype copy of it (fc2's weight gradient reads the kept FP8
// transpose), so it holds N F / t fp32 values less than under tensorwise
// scaling, which casts the stored activation; under full recomputation
// neither keeps more than the layer's output.
TEST(ActivationMemory, Fp8SwigluCastKeepsNoActivation) {
  auto c = testing::tiny_llama({.num_layers = 2, .hidden_size = 64, .num_attention_heads = 4, .seq_length = 32,
                                .vocab_size = 100},
                               2, 96);
  c.fp8.format = config::Fp8Format::Hybrid;
  const int64_t B = 2, N = B * c.seq_length, F = c.ffn_hidden_size;
  for (int tp : {1, 2}) {
    c.fp8.recipe = config::Fp8Recipe::Tensorwise;
    const size_t tensorwise = layer_bytes(tp, false, B, c.seq_length, c);
    const size_t tensorwise_full = layer_bytes(tp, false, B, c.seq_length, c, model::Recompute::Full);
    c.fp8.recipe = config::Fp8Recipe::Delayed;
    EXPECT_EQ(tensorwise - layer_bytes(tp, false, B, c.seq_length, c), static_cast<size_t>(N * F / tp * 4))
        << "tp " << tp;
    EXPECT_EQ(layer_bytes(tp, false, B, c.seq_length, c, model::Recompute::Full), tensorwise_full) << "tp " << tp;
  }
}

// Under --fp8-recipe blockwise a layer keeps, beside each linear's FP8
// input transpose, its scale_inv: one f32 per 128 rows (here N = 64: one
// block) of each of the C + C/t + C + F/t columns (qkv, proj, fc1, fc2
// inputs) instead of a shared slot; and like delayed scaling it casts
// SwiGLU's output inside the kernel (NOTE [FP8 SwiGLU cast]), so it keeps
// no N F / t fp32 activation, which tensorwise scaling does.
TEST(ActivationMemory, Fp8BlockwiseKeepsBlockScales) {
  auto c = testing::tiny_llama({.num_layers = 2, .hidden_size = 64, .num_attention_heads = 4, .seq_length = 32,
                                .vocab_size = 100},
                               2, 96);
  c.fp8.format = config::Fp8Format::Hybrid;
  const int64_t B = 2, N = B * c.seq_length, C = c.hidden_size, F = c.ffn_hidden_size;
  for (int tp : {1, 2}) {
    c.fp8.recipe = config::Fp8Recipe::Tensorwise;
    const auto tensorwise = static_cast<int64_t>(layer_bytes(tp, false, B, c.seq_length, c));
    c.fp8.recipe = config::Fp8Recipe::Blockwise;
    EXPECT_EQ(static_cast<int64_t>(layer_bytes(tp, false, B, c.seq_length, c)) - tensorwise,
              4 * (C + C / tp + C + F / tp) - 4 * N * F / tp)
        << "tp " << tp;
  }
}

// --no-fp8-wgrad: the weight gradients read the compute-dtype inputs, so a
// layer keeps exactly what a layer without FP8 keeps (no FP8 transposes, the
// SwiGLU activation, and with --fp8-dot-product-attention the qkv and
// attention output too, beside the FP8 codes of both, N (Q + C) / t bytes,
// that the FP8 attention's backward reads), for every recipe.
TEST(ActivationMemory, Fp8HighPrecisionWgradKeepsWhatBf16Keeps) {
  auto c = testing::tiny_llama({.num_layers = 2, .hidden_size = 64, .num_attention_heads = 4, .seq_length = 32,
                                .vocab_size = 100},
                               2, 96);
  const int64_t B = 2, N = B * c.seq_length, C = c.hidden_size, Q = c.qkv_width();
  for (int tp : {1, 2}) {
    const size_t plain = layer_bytes(tp, false, B, c.seq_length, c);
    const auto codes = static_cast<size_t>(N * (Q + C) / tp);
    for (auto recipe : {config::Fp8Recipe::Delayed, config::Fp8Recipe::Tensorwise, config::Fp8Recipe::Blockwise}) {
      config::GptConfig f = c;
      f.fp8.format = config::Fp8Format::Hybrid;
      f.fp8.recipe = recipe;
      f.fp8.dot_product_attention = recipe == config::Fp8Recipe::Delayed;
      EXPECT_NE(layer_bytes(tp, false, B, c.seq_length, f), plain) << "tp " << tp;  // the flag is what changes it
      f.fp8.high_precision_wgrad = true;
      EXPECT_EQ(layer_bytes(tp, false, B, c.seq_length, f), plain + (f.fp8.dot_product_attention ? codes : 0))
          << "tp " << tp << " recipe " << int(recipe);
    }
  }
}

// NOTE [FP8 attention keeps its codes] (model/transformer_layer.cpp): with
// --fp8-dot-product-attention and no recomputation a layer keeps the FP8
// qkv and output (1 byte each) instead of their compute-dtype copies (4
// bytes here): N (Q + C) / t x 3 bytes fewer, Q = (NH + 2G) HS. Under
// selective recomputation it keeps what it kept without the flag.
TEST(ActivationMemory, Fp8AttentionKeepsOnlyItsCodes) {
  auto c = testing::tiny_llama({.num_layers = 2, .hidden_size = 64, .num_attention_heads = 4, .seq_length = 32,
                                .vocab_size = 100},
                               2, 96);
  c.fp8.format = config::Fp8Format::Hybrid;
  const int64_t B = 2, N = B * c.seq_length, C = c.hidden_size, Q = c.qkv_width();
  for (int tp : {1, 2})
    for (auto r : {model::Recompute::None, model::Recompute::Selective}) {
      c.fp8.dot_product_attention = false;
      const size_t plain = layer_bytes(tp, false, B, c.seq_length, c, r);
      c.fp8.dot_product_attention = true;
      const size_t dpa = layer_bytes(tp, false, B, c.seq_length, c, r);
      const size_t saved = r == model::Recompute::None ? static_cast<size_t>(3 * N * (Q + C) / tp) : 0;
      EXPECT_EQ(plain - dpa, saved) << "tp " << tp << " recompute " << static_cast<int>(r);
    }
}

}  // namespace
}  // namespace tripod
