// Oracle test: tripod's GPT-2 (CPU backend, fp32) against an independent
// float64 PyTorch model (gen_gpt2_oracle.py; fixture version 1), and the
// same for the Llama family (gen_llama_oracle.py, version 2: RMSNorm, RoPE,
// grouped-query attention, SwiGLU, untied output layer, no biases): logits and loss of a
// micro-batch, every parameter gradient, and per-iteration loss, grad norm
// and weights after 3 AdamW iterations with clipping, warmup and cosine
// decay, driven through train::Trainer with 2 micro-batches per iteration.
// Version 3 (gen_moe_oracle.py) adds mixture-of-experts layers: Mixtral's or
// Qwen2-MoE's routing, a gated shared expert, a dense layer beside an MoE
// one, and the load-balancing and z losses in the gradients.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "testing/tensor_close.h"
#include "train/trainer.h"

namespace {

constexpr int32_t kMagic = 20261202;
std::string g_script, g_fixture;

struct Record {
  std::vector<int64_t> shape;
  std::vector<double> f64;
  std::vector<int32_t> i32;
};

struct Fixture {
  int32_t version = 0;
  int32_t cfg[20] = {};  // version 1: the first 9; version 2 adds G, F, rotary base; version 3 the MoE fields
  double hp[9];
  std::map<std::string, Record> rec;
  const Record& at(const std::string& n) const {
    auto it = rec.find(n);
    if (it == rec.end()) throw std::runtime_error("fixture has no record " + n);
    return it->second;
  }
};

Fixture load_fixture(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open fixture " + path);
  int32_t head[2];
  in.read(reinterpret_cast<char*>(head), sizeof head);
  if (head[0] != kMagic || head[1] < 1 || head[1] > 3)
    throw std::runtime_error("stale oracle fixture " + path + ": regenerate it with tests/oracle/gen_*_oracle.py");
  Fixture f;
  f.version = head[1];
  in.read(reinterpret_cast<char*>(f.cfg), (f.version == 1 ? 9 : f.version == 2 ? 12 : 20) * 4);
  in.read(reinterpret_cast<char*>(f.hp), sizeof f.hp);
  int32_t len;
  while (in.read(reinterpret_cast<char*>(&len), 4)) {
    std::string name(static_cast<size_t>(len), '\0');
    in.read(name.data(), len);
    int32_t dt, nd;
    in.read(reinterpret_cast<char*>(&dt), 4);
    in.read(reinterpret_cast<char*>(&nd), 4);
    Record r;
    r.shape.resize(static_cast<size_t>(nd));
    in.read(reinterpret_cast<char*>(r.shape.data()), 8 * nd);
    size_t n = 1;
    for (auto d : r.shape) n *= static_cast<size_t>(d);
    if (dt == 1) {
      r.i32.resize(n);
      in.read(reinterpret_cast<char*>(r.i32.data()), static_cast<std::streamsize>(4 * n));
    } else {
      r.f64.resize(n);
      in.read(reinterpret_cast<char*>(r.f64.data()), static_cast<std::streamsize>(8 * n));
    }
    f.rec.emplace(std::move(name), std::move(r));
  }
  return f;
}

// The fixture's token batches, one global batch per iteration.
class FixtureDataset final : public tripod::data::TokenDataset {
 public:
  FixtureDataset(const Fixture& f, int steps, int64_t gbs, int64_t T) : T_(T) {
    for (int s = 0; s < steps; ++s) {
      const auto& r = f.at("tokens." + std::to_string(s));
      tokens_.insert(tokens_.end(), r.i32.begin(), r.i32.end());
    }
    n_ = static_cast<int64_t>(tokens_.size()) / (T + 1);
  }
  int64_t num_samples() const override { return n_; }
  int64_t sample_length() const override { return T_ + 1; }
  void get(int64_t i, int32_t* out) const override {
    std::memcpy(out, tokens_.data() + i * (T_ + 1), static_cast<size_t>(T_ + 1) * 4);
  }
  std::string describe() const override { return "oracle fixture"; }

 private:
  std::vector<int32_t> tokens_;
  int64_t T_, n_;
};

// A parameter's tensor in its global layout (the fixture's): the local
// layout of a grouped qkv differs even at tp size 1 (ShardDim::QkvGroups).
tripod::Tensor to_full(const tripod::model::Param& p, const tripod::Tensor& local) {
  tripod::Tensor full = tripod::Tensor::empty(p.spec.global_shape, tripod::DType::F32);
  tripod::model::place_shard(full, local, p.spec.shard, 1, 0);
  return full;
}

TEST(Oracle, MatchesPyTorchFloat64) {
  const std::string cmd = "/usr/bin/python3 " + g_script + " " + g_fixture + " > /dev/null";
  if (std::system("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0)
    GTEST_SKIP() << "python3-torch is not installed (scripts/setup.sh installs it)";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "fixture generator failed: " << cmd;
  const Fixture f = load_fixture(g_fixture);
  const int L = f.cfg[0], C = f.cfg[1], NH = f.cfg[2], T = f.cfg[3], V = f.cfg[4], Vp = f.cfg[5],
            B = f.cfg[6], NM = f.cfg[7], STEPS = f.cfg[8];

  tripod::train::TrainArgs a;
  a.model.num_layers = L;
  a.model.hidden_size = C;
  a.model.num_attention_heads = NH;
  a.model.seq_length = T;
  a.model.vocab_size = V;
  if (f.version >= 2) {  // the Llama family, as gen_llama_oracle.py builds it
    using P = tripod::config::GptConfig;
    a.model.group_query_attention = true;
    a.model.num_query_groups = f.cfg[9];
    a.model.ffn_hidden_size = f.cfg[10];
    a.model.rotary_base = static_cast<float>(f.cfg[11]);
    a.model.position_embedding_type = P::Position::Rope;
    a.model.normalization = P::Norm::RMSNorm;
    a.model.swiglu = true;
    a.model.untie_embeddings_and_output_weights = true;
    a.model.add_bias_linear = false;
  }
  if (f.version == 3) {  // MoE layers, as gen_moe_oracle.py builds them
    auto& m = a.model.moe;
    m.num_experts = f.cfg[12];
    m.router_topk = f.cfg[13];
    m.ffn_hidden_size = f.cfg[14];
    m.shared_expert_intermediate_size = f.cfg[15];
    m.shared_expert_gate = f.cfg[15] > 0;
    m.router_pre_softmax = f.cfg[16] != 0;
    m.aux_loss_coeff = static_cast<float>(f.cfg[17] * 1e-6);
    m.z_loss_coeff = static_cast<float>(f.cfg[18] * 1e-6);
    m.layer_freq = "[";
    for (int l = 0; l < L; ++l) m.layer_freq += std::string(l ? "," : "") + ((f.cfg[19] >> l) & 1 ? "1" : "0");
    m.layer_freq += "]";
  }
  a.batch.micro_batch_size = B;
  a.batch.global_batch_size = B * NM;
  a.batch.train_iters = STEPS;
  a.optimizer.lr.max_lr = f.hp[0];
  a.optimizer.lr.min_lr = f.hp[1];
  a.optimizer.lr.warmup_iters = static_cast<int64_t>(f.hp[2]);
  a.optimizer.lr.decay_iters = static_cast<int64_t>(f.hp[3]);
  a.optimizer.lr_decay_style = "cosine";
  a.optimizer.adam.weight_decay = f.hp[4];
  a.optimizer.clip_grad = f.hp[5];
  a.optimizer.adam.beta1 = f.hp[6];
  a.optimizer.adam.beta2 = f.hp[7];
  a.optimizer.adam.eps = f.hp[8];
  a.logging.eval_interval = 0;
  auto be = tripod::backend::make_cpu_backend();
  tripod::data::DatasetSplits splits;
  splits.train = std::make_unique<FixtureDataset>(f, STEPS, B * NM, T);
  tripod::train::Trainer trainer(a, *be, std::move(splits));
  auto& model = trainer.model();
  ASSERT_EQ(model.padded_vocab(), Vp);
  auto& store = model.params();
  // The fixture holds init, grad and final of every parameter, plus the
  // STEPS token batches, logits0, losses and grad_norms: the same set.
  ASSERT_EQ(3 * store.params().size(), f.rec.size() - static_cast<size_t>(STEPS + 3));
  for (auto& p : store.params()) {
    const auto& r = f.at("init." + p.spec.name);
    tripod::Tensor full = tripod::Tensor::empty(p.spec.global_shape, tripod::DType::F32);
    for (size_t i = 0; i < r.f64.size(); ++i) full.data<float>()[i] = static_cast<float>(r.f64[i]);
    store.set_from_full(p, full);
  }

  // Logits of the first micro-batch, before any step.
  auto acts = model.make_acts(B, T);
  const auto& tok = f.at("tokens.0").i32;
  tripod::Tensor tokens = tripod::Tensor::empty({B, T}, tripod::DType::I32);
  tripod::Tensor targets = tripod::Tensor::empty({B, T}, tripod::DType::I32);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      tokens.data<int32_t>()[b * T + t] = tok[static_cast<size_t>(b * (T + 1) + t)];
      targets.data<int32_t>()[b * T + t] = tok[static_cast<size_t>(b * (T + 1) + t + 1)];
    }
  be->copy(acts.tokens, tokens);
  be->copy(acts.targets, targets);
  model.forward(acts, false, 0.f, 0);
  const auto& logits_ref = f.at("logits0").f64;
  tripod::testing::expect_close("logits", model.last_logits().data<float>(), logits_ref.data(),
                                logits_ref.size(), 1e-5);

  const auto& losses = f.at("losses").f64;
  const auto& norms = f.at("grad_norms").f64;
  for (int s = 0; s < STEPS; ++s) {
    auto r = trainer.train_step();
    EXPECT_NEAR(r.lm_loss, losses[static_cast<size_t>(s)], 1e-5 * losses[static_cast<size_t>(s)]) << "iteration " << s + 1;
    EXPECT_NEAR(r.grad_norm, norms[static_cast<size_t>(s)], 1e-5 * norms[static_cast<size_t>(s)]) << "iteration " << s + 1;
    if (s == 0)
      for (auto& p : store.params()) {
        tripod::Tensor g = to_full(p, store.grad_to_host(p));
        const auto& ref = f.at("grad." + p.spec.name).f64;
        tripod::testing::expect_close("grad " + p.spec.name, g.data<float>(), ref.data(), ref.size(), 1e-5);
      }
  }
  for (auto& p : store.params()) {
    tripod::Tensor w = to_full(p, store.value_to_host(p));
    const auto& ref = f.at("final." + p.spec.name).f64;
    tripod::testing::expect_close("weights " + p.spec.name, w.data<float>(), ref.data(), ref.size(), 1e-5);
  }
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s GENERATOR.py FIXTURE.bin\n", argv[0]);
    return 2;
  }
  g_script = argv[1];
  g_fixture = argv[2];
  return RUN_ALL_TESTS();
}
