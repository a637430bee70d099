// The MoE MLP half (model/moe_layer.h) on the CPU backend against the
// float64 reference of moe_reference.h: the output, the auxiliary losses
// and the tokens per expert, and every gradient (input, router, experts,
// shared expert, gate) against central differences of the reference's
// objective J = sum(out * dout) + s (aux + z). Configurations: Mixtral
// (softmax after the top-k, SwiGLU), Qwen2-MoE (softmax before, no
// renormalisation, a gated shared expert, per-sequence aux loss), DeepSeek-V3
// (sigmoid with an expert bias, scaling factor), capacity with either drop
// policy; and the edge cases: an expert with no tokens, every token on one
// expert, top-k equal to the expert count. Plus the expert-bias update rule.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "model/gpt_model.h"
#include "plan/memory_model.h"
#include "moe_reference.h"
#include "testing/tiny_model.h"

namespace tripod {
namespace {

constexpr int64_t kB = 2, kT = 8, kN = kB * kT, kC = 16;

struct Case {
  const char* name;
  std::function<void(config::GptConfig&)> edit;
  float std = 0.3f;        // init std: logits well apart, so the top-k is stable under the differences
  float bias_scale = 0.f;  // expert bias values (sigmoid): bias_scale * (e - E/2)
  int router_winner = -1;  // >= 0: a router that sends every token to this expert first
};

std::vector<double> host(model::GptModel& m, const model::Param* p) {
  if (!p) return {};
  Tensor h = m.params().value_to_host(*p);
  return std::vector<double>(h.data<float>(), h.data<float>() + h.numel());
}
std::vector<double> grad(model::GptModel& m, const model::Param* p) {
  Tensor h = m.params().grad_to_host(*p);
  return std::vector<double>(h.data<float>(), h.data<float>() + h.numel());
}

void run_case(const Case& cs) {
  SCOPED_TRACE(cs.name);
  auto be = backend::make_cpu_backend();
  config::GptConfig cfg = testing::shaped({1, kC, 2, kT, 40});
  cfg.moe.num_experts = 4;
  cfg.moe.router_topk = 2;
  cfg.moe.ffn_hidden_size = 8;
  cfg.moe.aux_loss_coeff = 0.5f;  // large, so that a wrong aux or z gradient shows against the rest
  cfg.moe.z_loss_coeff = 0.2f;
  cs.edit(cfg);
  cfg.finalize();
  model::GptModel m(cfg, model::StageConfig{}, *be);
  m.params().init(7, cs.std, 1);
  model::MoeParams& P = const_cast<model::MoeParams&>(m.stage_params().layers[0].moe);
  const int64_t E = cfg.moe.num_experts;
  if (P.expert_bias) {
    Tensor b = Tensor::empty({E}, DType::F32);
    for (int64_t e = 0; e < E; ++e) b.data<float>()[e] = cs.bias_scale * static_cast<float>(e - E / 2);
    m.params().set_from_full(*P.expert_bias, b);
  }
  if (cs.router_winner >= 0) {  // logits = w[e] x[0] with x[0] >= 3: the winner far ahead, the others in order
    Tensor w = Tensor::zeros({E, kC}, DType::F32);
    for (int64_t e = 0; e < E; ++e) w.data<float>()[e * kC] = e == cs.router_winner ? 2.f : 0.1f * (e + 1);
    m.params().set_from_full(*P.router_weight, w);
  }
  const model::MoeLayer& layer = *m.layers()[0].moe();
  // The reference, from the same weights.
  testing::MoeRef ref;
  const config::LayerSpec s = cfg.layer_spec(0);
  ref.C = kC; ref.E = E; ref.k = s.router_topk; ref.Fe = s.moe_ffn_hidden_size; ref.Fs = s.shared_expert_size;
  ref.swiglu = cfg.swiglu; ref.bias = cfg.add_bias_linear; ref.sigmoid = cfg.moe.sigmoid();
  ref.pre_softmax = cfg.moe.router_pre_softmax; ref.gate = cfg.moe.shared_expert_gate;
  ref.scaling = cfg.moe.router_topk_scaling_factor; ref.capacity_factor = std::max(0.f, cfg.moe.expert_capacity_factor);
  ref.drop_by_probs = cfg.moe.token_drop_policy == "probs";
  ref.aux_coeff = cfg.moe.balancing_coeff(); ref.z_coeff = cfg.moe.z_loss_coeff;
  ref.seq_length = cfg.moe.seq_aux_loss() ? kT : 0;
  ref.router = host(m, P.router_weight);
  ref.expert_bias = host(m, P.expert_bias);
  for (const model::ExpertParams& e : P.experts) {
    ref.w1.push_back(host(m, e.fc1_weight)); ref.b1.push_back(host(m, e.fc1_bias));
    ref.w2.push_back(host(m, e.fc2_weight)); ref.b2.push_back(host(m, e.fc2_bias));
  }
  ref.s_w1 = host(m, P.shared.fc1_weight); ref.s_b1 = host(m, P.shared.fc1_bias);
  ref.s_w2 = host(m, P.shared.fc2_weight); ref.s_b2 = host(m, P.shared.fc2_bias);
  ref.gate_w = host(m, P.shared_gate);
  // Inputs.
  std::mt19937 rng(11);
  std::normal_distribution<double> nd;
  std::vector<double> x(kN * kC), dout(kN * kC);
  for (double& v : x) v = nd(rng);
  if (cs.router_winner >= 0)
    for (int64_t n = 0; n < kN; ++n) x[n * kC] = 3 + std::abs(x[n * kC]);
  for (double& v : dout) v = nd(rng);
  Tensor xt = Tensor::empty({kN, kC}, DType::F32), dt = Tensor::empty({kN, kC}, DType::F32);
  for (int64_t i = 0; i < kN * kC; ++i) xt.data<float>()[i] = static_cast<float>(x[i]);
  for (int64_t i = 0; i < kN * kC; ++i) dt.data<float>()[i] = static_cast<float>(dout[i]);
  // Forward and backward of the layer.
  const float scale = 3.f;
  model::MoeActs a;
  a.with_grad = true;
  a.aux_loss_scale = scale;
  Tensor out = Tensor::empty({kN, kC}, DType::F32), dx = Tensor::empty({kN, kC}, DType::F32);
  m.params().zero_grad();
  layer.forward(xt, out, a);
  // What the layer keeps is what the planner counts (dropless: N k rows
  // at the experts; f32 activations).
  if (cfg.moe.expert_capacity_factor <= 0)
    EXPECT_EQ(static_cast<double>(a.bytes()), plan::tripod_moe_layer_activation_bytes(s, 1, kN, 4, 1));
  layer.backward(dx, dt, a);
  const testing::MoeRef::Out r = ref.forward(x, kN);
  for (int64_t i = 0; i < kN * kC; ++i) ASSERT_NEAR(out.data<float>()[i], r.y[i], 2e-5) << "out " << i;
  EXPECT_EQ(a.tokens_per_expert, r.tokens_per_expert);
  const model::MoeStats st = layer.take_stats();
  if (ref.aux_coeff > 0) EXPECT_NEAR(st.aux_loss * ref.aux_coeff, r.aux, 1e-6);
  EXPECT_NEAR(st.z_loss * ref.z_coeff, r.z, 1e-6);
  // Gradients against central differences of J in f64.
  auto J = [&](const testing::MoeRef& rf, const std::vector<double>& xx) {
    const testing::MoeRef::Out o = rf.forward(xx, kN);
    double j = scale * (o.aux + o.z);
    for (int64_t i = 0; i < kN * kC; ++i) j += o.y[i] * dout[i];
    return j;
  };
  const double h = 1e-6;
  auto check = [&](const char* what, std::vector<double>& w, const std::vector<double>& got, const auto& eval) {
    ASSERT_EQ(w.size(), got.size()) << what;
    double worst = 0, mag = 1;
    const size_t step = std::max<size_t>(1, w.size() / 40);  // up to ~40 elements per tensor, spread over it
    for (size_t i = 0; i < w.size(); i += step) {
      const double keep = w[i];
      w[i] = keep + h;
      const double jp = eval();
      w[i] = keep - h;
      const double jm = eval();
      w[i] = keep;
      const double fd = (jp - jm) / (2 * h);
      worst = std::max(worst, std::abs(fd - got[i]));
      mag = std::max(mag, std::abs(fd));
    }
    EXPECT_LT(worst / mag, 2e-4) << what << ": max |grad - central difference| " << worst;
  };
  std::vector<double> xx = x;
  check("d x", xx, std::vector<double>(dx.data<float>(), dx.data<float>() + kN * kC), [&] { return J(ref, xx); });
  auto eval_ref = [&] { return J(ref, x); };
  check("router", ref.router, grad(m, P.router_weight), eval_ref);
  for (size_t e = 0; e < P.experts.size(); ++e) {
    check("expert fc1", ref.w1[e], grad(m, P.experts[e].fc1_weight), eval_ref);
    check("expert fc2", ref.w2[e], grad(m, P.experts[e].fc2_weight), eval_ref);
    if (ref.bias) {
      check("expert fc1 bias", ref.b1[e], grad(m, P.experts[e].fc1_bias), eval_ref);
      check("expert fc2 bias", ref.b2[e], grad(m, P.experts[e].fc2_bias), eval_ref);
    }
  }
  if (ref.Fs > 0) {
    check("shared fc1", ref.s_w1, grad(m, P.shared.fc1_weight), eval_ref);
    check("shared fc2", ref.s_w2, grad(m, P.shared.fc2_weight), eval_ref);
  }
  if (ref.gate) check("gate", ref.gate_w, grad(m, P.shared_gate), eval_ref);
  if (P.expert_bias)  // the bias only chooses: no gradient
    for (double g : grad(m, P.expert_bias)) EXPECT_EQ(g, 0.0);
}

TEST(MoeLayer, MixtralSoftmaxAfterTopkSwiglu) {
  run_case({"mixtral", [](config::GptConfig& c) {
              c.swiglu = true;
              c.add_bias_linear = false;
            }});
}

TEST(MoeLayer, Qwen2MoePreSoftmaxGatedSharedExpertSeqAuxLoss) {
  run_case({"qwen2-moe", [](config::GptConfig& c) {
              c.moe.router_pre_softmax = true;
              c.moe.shared_expert_intermediate_size = 12;
              c.moe.shared_expert_gate = true;
              c.moe.router_load_balancing_type = "seq_aux_loss";
            }});
}

TEST(MoeLayer, DeepSeekSigmoidExpertBiasScaling) {
  run_case({"deepseek", [](config::GptConfig& c) {
              c.moe.router_score_function = "sigmoid";
              c.moe.router_enable_expert_bias = true;
              c.moe.router_topk_scaling_factor = 2.5f;
              c.moe.shared_expert_intermediate_size = 8;
              c.swiglu = true;
            },
            0.3f, 0.2f});
}

TEST(MoeLayer, CapacityDropsByProbsOrPosition) {
  for (const char* policy : {"probs", "position"})
    run_case({policy, [policy](config::GptConfig& c) {
                c.moe.expert_capacity_factor = 0.5f;
                c.moe.token_drop_policy = policy;
              }});
}

TEST(MoeLayer, EdgeCases) {
  // Every token on expert 2 (top-1): experts 0, 1 and 3 get no token.
  run_case({"one expert", [](config::GptConfig& c) { c.moe.router_topk = 1; }, 0.3f, 0.f, 2});
  // Every token on experts 1 and 3 (top-2): experts 0 and 2 get none.
  run_case({"zero-token experts", [](config::GptConfig&) {}, 0.3f, 0.f, 1});
  run_case({"top-k = E", [](config::GptConfig& c) { c.moe.router_topk = 4; }});
  run_case({"sigmoid top-1", [](config::GptConfig& c) {
              c.moe.router_score_function = "sigmoid";
              c.moe.router_topk = 1;
            }});
}

TEST(MoeLayer, ExpertBiasUpdateIsTheSignOfTheLoadGap) {
  auto be = backend::make_cpu_backend();
  config::GptConfig cfg = testing::shaped({1, kC, 2, kT, 40});
  cfg.moe.num_experts = 4;
  cfg.moe.router_score_function = "sigmoid";
  cfg.moe.router_enable_expert_bias = true;
  cfg.moe.router_bias_update_rate = 0.25f;
  cfg.finalize();
  model::GptModel m(cfg, model::StageConfig{}, *be);
  m.params().init(7, 0.02f, 1);
  const model::MoeLayer& layer = *m.layers()[0].moe();
  layer.update_expert_bias({10, 2, 6, 6});  // mean 6: below, above, equal, equal
  const std::vector<double> b = host(m, m.stage_params().layers[0].moe.expert_bias);
  EXPECT_EQ(b, (std::vector<double>{-0.25, 0.25, 0, 0}));
}

}  // namespace
}  // namespace tripod
