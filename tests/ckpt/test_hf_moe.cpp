// Hugging Face MixtralForCausalLM, Qwen2MoeForCausalLM and
// Qwen3MoeForCausalLM export/import (`tripod convert`, interop/hf_moe.h),
// through the real `tripod` executable (Qwen3-MoE: --qk-layernorm, no shared
// expert, a dense first layer; its config.json fields checked):
//  - Mixtral (every layer MoE, top-2 of 4, GQA, untied) and Qwen2-MoE
//    (pre-softmax routing, a gated shared expert, a dense first layer):
//    export a briefly trained checkpoint; a float64 PyTorch forward written
//    from the HF architectures (hf_moe_forward.py, when python3-torch is
//    installed) gives logits within 1e-5 of tripod's; import the export and
//    export again: the files are byte-identical, every weight bit-identical;
//  - a folder written by hand in the hub's per-expert names
//    (block_sparse_moe.experts.e.w1/w2/w3; mlp.experts.e.gate_proj/...,
//    mlp.shared_expert*, decoder_sparse_step 2): every imported tensor is
//    where the layout says (fc1 = [w1 | w3], ...); the same weights in the
//    fused layout of recent transformers (gate_up_proj (E, 2Fe, C),
//    down_proj (E, C, Fe)) and transposed import to the same bytes;
//  - the hand-built Mixtral with every expert a copy of one MLP computes the
//    dense model (the routing probabilities sum to 1): its logits equal the
//    LlamaForCausalLM import of that MLP within 1e-5;
//  - an ep 2 checkpoint (experts in per-ep files) exports the whole model;
//  - refusals: non-zero Qwen2-MoE q/k/v biases, router_jitter_noise, and the
//    export of sigmoid routing, each naming the cause.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hf_export_check.h"

namespace {

using namespace ckpt_test;
using namespace tripod;
using json = nlohmann::json;

const std::string kLlama =
    "--num-layers 2 --hidden-size 64 --num-attention-heads 8 --seq-length 32 --mock-data --vocab-size 500 "
    "--micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --seed 5 --log-interval 1 --eval-interval 0 "
    "--group-query-attention --num-query-groups 2 --position-embedding-type rope "
    "--normalization RMSNorm --norm-epsilon 1e-6 --swiglu "
    "--untie-embeddings-and-output-weights --disable-bias-linear ";
// Mixtral's intermediate_size is the experts' width: --ffn-hidden-size is it too.
const std::string kMixtral = kLlama + "--ffn-hidden-size 48 --num-experts 4 --moe-router-topk 2 "
                                      "--moe-ffn-hidden-size 48 --moe-aux-loss-coeff 1e-2";
const std::string kQwen2Moe = kLlama + "--ffn-hidden-size 96 --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 "
                                       "--moe-router-pre-softmax --moe-shared-expert-intermediate-size 40 "
                                       "--moe-shared-expert-gate --moe-layer-freq [0,1] --moe-aux-loss-coeff 1e-2";

void export_round_trip(const std::string& name, const std::string& flags) {
  Scratch s(name);
  const HfExportRun r = export_and_compare(s, flags, "hf_moe_forward.py", 500);
  if (::testing::Test::HasFailure()) return;
  if (r.no_torch) std::printf("python3-torch not installed: the PyTorch forward was not compared\n");
  import_round_trip(s, r, 64);
  if (::testing::Test::HasFatalFailure()) return;
  finetune_from_import(s, r, flags);
  if (!::testing::Test::HasFailure()) fs::remove_all(s.dir);
}

TEST(HfMoe, MixtralExportMatchesPyTorchAndImportRoundTrips) {
  export_round_trip("hf_mixtral", kMixtral);
}

TEST(HfMoe, Qwen2MoeExportMatchesPyTorchAndImportRoundTrips) { export_round_trip("hf_qwen2_moe", kQwen2Moe); }

// Qwen3-MoE: --qk-layernorm, no shared expert, renormalised top-k
// (norm_topk_prob true: Qwen3MoeConfig's default is false, so it is
// written), a dense first layer (mlp_only_layers).
TEST(HfMoe, Qwen3MoeExportMatchesPyTorchAndImportRoundTrips) {
  const std::string flags = kLlama + "--qk-layernorm --ffn-hidden-size 96 --num-experts 4 --moe-router-topk 2 "
                                     "--moe-ffn-hidden-size 48 --moe-layer-freq [0,1]";
  Scratch s("hf_qwen3_moe");
  const HfExportRun r = export_and_compare(s, flags, "hf_moe_forward.py", 500);
  if (HasFailure()) return;
  if (r.no_torch) std::printf("python3-torch not installed: the PyTorch forward was not compared\n");
  import_round_trip(s, r, 64);
  if (HasFatalFailure()) return;
  const json cfg = json::parse(slurp(s / "hf" / "config.json"));
  EXPECT_EQ(cfg["architectures"], json::array({"Qwen3MoeForCausalLM"}));
  EXPECT_EQ(cfg["model_type"], "qwen3_moe");
  EXPECT_EQ(cfg["head_dim"], 8);
  EXPECT_EQ(cfg["num_experts"], 4);
  EXPECT_EQ(cfg["num_experts_per_tok"], 2);
  EXPECT_EQ(cfg["moe_intermediate_size"], 48);
  EXPECT_EQ(cfg["intermediate_size"], 96);
  EXPECT_EQ(cfg["norm_topk_prob"], true);
  EXPECT_EQ(cfg["decoder_sparse_step"], 1);
  EXPECT_EQ(cfg["mlp_only_layers"], json::array({0}));
  EXPECT_EQ(cfg["attention_bias"], false);
  EXPECT_FALSE(cfg.contains("shared_expert_intermediate_size"));
  const auto st = ckpt::SafetensorsFile::open((s / "hf" / "model.safetensors").string());
  for (const char* n : {"model.layers.1.self_attn.q_norm.weight", "model.layers.1.mlp.gate.weight",
                        "model.layers.1.mlp.experts.3.down_proj.weight", "model.layers.0.mlp.gate_proj.weight"})
    EXPECT_TRUE(st.contains(n)) << n;
  const auto ck = ckpt::CheckpointReader::open((s / "ck2").string()).config();
  EXPECT_TRUE(ck.qk_layernorm);
  EXPECT_FALSE(ck.moe.router_pre_softmax);
  if (!HasFailure()) fs::remove_all(s.dir);
}

// A checkpoint saved with expert parallelism keeps ep rank 1's experts in
// a file of their own (model_rank_0_0_ep1.safetensors); the export reads
// through the checkpoint's index and writes the whole model: every tensor
// of the single-process run's export, the same shapes, the values within
// 1e-4 of the largest (the two trainings sum in other orders; with
// parity's --adam-eps 1e-6, as the default 1e-8 lets Adam blow up rounding
// noise in gradients near zero; measured 1.0e-5 to 1.5e-5 after 3
// iterations on one 2-core machine, under 1e-5 on another: the BLAS
// kernels differ by CPU). A missing or misplaced expert is off by its
// whole size.
TEST(HfMoe, MixtralExportOfAnEp2CheckpointHasEveryExpert) {
  Scratch s("hf_mixtral_ep2");
  const std::string bin = env("TRIPOD_BIN"), log = (s / "log").string(), flags = kMixtral + " --adam-eps 1e-6";
  ASSERT_EQ(sh(bin + " train " + flags + " --train-iters 3 --save " + (s / "ck1").string() + " > " + log + " 2>&1"),
            0) << slurp(log);
  ASSERT_EQ(sh(bin + " launch --nproc-per-node 2 train " + flags + " --expert-model-parallel-size 2 --train-iters 3 "
               "--save " + (s / "ck2").string() + " > " + log + " 2>&1"), 0) << slurp(log);
  ASSERT_TRUE(fs::exists(s / "ck2" / "iter_0000003" / "model_rank_0_0_ep1.safetensors"));
  for (const char* k : {"1", "2"})
    ASSERT_EQ(sh(bin + " convert --load " + (s / (std::string("ck") + k)).string() + " --export-hf " +
                 (s / (std::string("hf") + k)).string() + " > " + log + " 2>&1"), 0) << slurp(log);
  const auto one = ckpt::SafetensorsFile::open((s / "hf1" / "model.safetensors").string());
  const auto two = ckpt::SafetensorsFile::open((s / "hf2" / "model.safetensors").string());
  ASSERT_EQ(one.entries().size(), two.entries().size());
  int experts = 0;
  for (const ckpt::StEntry& e : one.entries()) {
    ASSERT_TRUE(two.contains(e.name)) << e.name << " missing from the ep 2 export";
    EXPECT_EQ(two.find(e.name)->shape, e.shape) << e.name;
    experts += e.name.find("block_sparse_moe.experts.") != std::string::npos;
    const Tensor a = one.read_f32(e.name), b = two.read_f32(e.name);
    double diff = 0, big = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      diff = std::max(diff, std::fabs(double(a.data<float>()[i]) - b.data<float>()[i]));
      big = std::max(big, std::fabs(double(a.data<float>()[i])));
    }
    EXPECT_LE(diff, 1e-4 * big) << e.name;
  }
  EXPECT_EQ(experts, 2 * 4 * 3) << "2 layers x 4 experts x w1, w2, w3";
  if (!::testing::Test::HasFailure()) fs::remove_all(s.dir);
}

// ---- Hand-built folders in the hub's names ----

constexpr int64_t C = 32, NH = 4, G = 2, HS = C / NH, V = 300, E = 3, K = 2, Fe = 24, Fd = 40, Fs = 16, L = 2;

Tensor rnd(std::mt19937& g, Shape shape, float scale, float mean = 0.f) {
  Tensor t = Tensor::empty(shape, DType::F32);
  std::normal_distribution<float> n(mean, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = n(g);
  return t;
}

using Named = std::vector<std::pair<std::string, Tensor>>;

const Tensor& find(const Named& w, const std::string& n) {
  for (const auto& [k, t] : w)
    if (k == n) return t;
  throw std::runtime_error("no " + n);
}

// Embeddings, attention and norms of a Llama-family model (no biases).
Named llama_part(std::mt19937& g) {
  Named w{{"model.embed_tokens.weight", rnd(g, {V, C}, 0.5f)}, {"lm_head.weight", rnd(g, {V, C}, 0.5f)},
          {"model.norm.weight", rnd(g, {C}, 0.2f, 1.f)}};
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    w.emplace_back(p + "input_layernorm.weight", rnd(g, {C}, 0.2f, 1.f));
    w.emplace_back(p + "post_attention_layernorm.weight", rnd(g, {C}, 0.2f, 1.f));
    w.emplace_back(p + "self_attn.q_proj.weight", rnd(g, {C, C}, 0.2f));
    w.emplace_back(p + "self_attn.k_proj.weight", rnd(g, {G * HS, C}, 0.2f));
    w.emplace_back(p + "self_attn.v_proj.weight", rnd(g, {G * HS, C}, 0.2f));
    w.emplace_back(p + "self_attn.o_proj.weight", rnd(g, {C, C}, 0.2f));
  }
  return w;
}

json llama_config(const std::string& arch, const std::string& type) {
  return {{"architectures", {arch}}, {"model_type", type}, {"vocab_size", V}, {"hidden_size", C},
          {"num_hidden_layers", L}, {"num_attention_heads", NH}, {"num_key_value_heads", G},
          {"hidden_act", "silu"}, {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-6},
          {"rope_theta", 10000.0}, {"tie_word_embeddings", false}};
}

void write_folder(const fs::path& dir, const json& cfg, const Named& w) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << cfg.dump(2);
  ckpt::write_safetensors((dir / "model.safetensors").string(), w, {{"format", "pt"}}, false);
}

Tensor stack2(const Tensor& a, const Tensor& b) {  // rows of a, then rows of b
  Tensor out = Tensor::empty({a.size(0) + b.size(0), a.size(1)}, DType::F32);
  std::memcpy(out.data<float>(), a.data<float>(), a.nbytes());
  std::memcpy(out.data<float>() + a.numel(), b.data<float>(), b.nbytes());
  return out;
}

void expect_same(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.numel(), b.numel()) << what;
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << what;
}

// The logits of tokens 0..T-1 (a fixed sequence) of a tripod checkpoint.
std::vector<float> logits_of(const std::string& ckpt_dir, int64_t T) {
  const auto reader = ckpt::CheckpointReader::open(ckpt_dir);
  auto be = backend::make_cpu_backend();
  model::GptModel m(reader.config(), model::StageConfig{}, *be);
  ckpt::load_params(reader, m.params(), 0, 0.02f, 2);
  auto acts = m.make_acts(1, T);
  Tensor tok = Tensor::empty({1, T}, DType::I32), zeros = Tensor::zeros({1, T}, DType::I32);
  for (int64_t t = 0; t < T; ++t) tok.data<int32_t>()[t] = static_cast<int32_t>((t * 53 + 7) % V);
  be->copy(acts.tokens, tok);
  be->copy(acts.targets, zeros);
  m.forward(acts, false, 0.f, 0);
  const int64_t Vp = m.padded_vocab();
  Tensor logits = Tensor::empty({T, Vp}, DType::F32);
  be->copy(logits, m.last_logits());
  be->synchronize();
  std::vector<float> out;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t v = 0; v < V; ++v) out.push_back(logits.data<float>()[t * Vp + v]);
  return out;
}

int convert(const Scratch& s, const fs::path& in, const fs::path& out) {
  return sh(env("TRIPOD_BIN") + " convert --import-hf " + in.string() + " --save " + out.string() + " > " +
            (s / "log").string() + " 2>&1");
}

TEST(HfMoe, MixtralHubNamesFusedLayoutAndDenseEquivalent) {
  Scratch s("hf_moe_hub_mixtral");
  std::mt19937 g(7);
  Named base = llama_part(g), hub = base, fused = base, transposed = base, same = base, dense = base;
  json cfg = llama_config("MixtralForCausalLM", "mixtral");
  cfg["intermediate_size"] = Fe;
  cfg["num_local_experts"] = E;
  cfg["num_experts_per_tok"] = K;
  cfg["router_aux_loss_coef"] = 0.02;
  cfg["output_router_logits"] = true;
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    const Tensor router = rnd(g, {E, C}, 1.f);
    hub.emplace_back(p + "block_sparse_moe.gate.weight", router);
    fused.emplace_back(p + "mlp.gate.weight", router);
    transposed.emplace_back(p + "mlp.gate.weight", router);
    same.emplace_back(p + "block_sparse_moe.gate.weight", router);
    Tensor gate_up = Tensor::empty({E, 2 * Fe, C}, DType::F32), down = Tensor::empty({E, C, Fe}, DType::F32);
    Tensor gate_up_t = Tensor::empty({E, C, 2 * Fe}, DType::F32), down_t = Tensor::empty({E, Fe, C}, DType::F32);
    const Tensor w1s = rnd(g, {Fe, C}, 0.3f), w3s = rnd(g, {Fe, C}, 0.3f), w2s = rnd(g, {C, Fe}, 0.3f);
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = fmt::format("{}block_sparse_moe.experts.{}.", p, e);
      const Tensor w1 = rnd(g, {Fe, C}, 0.3f), w3 = rnd(g, {Fe, C}, 0.3f), w2 = rnd(g, {C, Fe}, 0.3f);
      hub.emplace_back(x + "w1.weight", w1);
      hub.emplace_back(x + "w2.weight", w2);
      hub.emplace_back(x + "w3.weight", w3);
      same.emplace_back(x + "w1.weight", w1s);
      same.emplace_back(x + "w2.weight", w2s);
      same.emplace_back(x + "w3.weight", w3s);
      const Tensor gu = stack2(w1, w3);
      std::memcpy(gate_up.data<float>() + e * 2 * Fe * C, gu.data<float>(), gu.nbytes());
      std::memcpy(down.data<float>() + e * C * Fe, w2.data<float>(), w2.nbytes());
      for (int64_t r = 0; r < 2 * Fe; ++r)
        for (int64_t c = 0; c < C; ++c) gate_up_t.data<float>()[(e * C + c) * 2 * Fe + r] = gu.data<float>()[r * C + c];
      for (int64_t r = 0; r < C; ++r)
        for (int64_t f = 0; f < Fe; ++f) down_t.data<float>()[(e * Fe + f) * C + r] = w2.data<float>()[r * Fe + f];
    }
    fused.emplace_back(p + "mlp.experts.gate_up_proj", gate_up);
    fused.emplace_back(p + "mlp.experts.down_proj", down);
    transposed.emplace_back(p + "mlp.experts.gate_up_proj", gate_up_t);
    transposed.emplace_back(p + "mlp.experts.down_proj", down_t);
    dense.emplace_back(p + "mlp.gate_proj.weight", w1s);
    dense.emplace_back(p + "mlp.up_proj.weight", w3s);
    dense.emplace_back(p + "mlp.down_proj.weight", w2s);
  }
  write_folder(s / "hub", cfg, hub);
  write_folder(s / "fused", cfg, fused);
  write_folder(s / "transposed", cfg, transposed);
  write_folder(s / "same", cfg, same);
  json dcfg = llama_config("LlamaForCausalLM", "llama");
  dcfg["intermediate_size"] = Fe;
  write_folder(s / "dense", dcfg, dense);
  for (const char* f : {"hub", "fused", "transposed", "same", "dense"})
    ASSERT_EQ(convert(s, s / f, s / (std::string(f) + "_ck")), 0) << f << ": " << slurp(s / "log");
  // router_aux_loss_coef with output_router_logits is the coefficient to train with.
  ASSERT_EQ(convert(s, s / "hub", s / "hub_ck2"), 0);
  EXPECT_NE(slurp(s / "log").find("--moe-aux-loss-coeff 0.02"), std::string::npos) << slurp(s / "log");

  // Every tensor where the layout says.
  const auto ck = ckpt::CheckpointReader::open((s / "hub_ck").string());
  EXPECT_EQ(ck.config().moe.num_experts, E);
  EXPECT_EQ(ck.config().moe.router_topk, K);
  EXPECT_EQ(ck.config().moe.ffn_hidden_size, Fe);
  EXPECT_FALSE(ck.config().moe.router_pre_softmax);
  for (int64_t l = 0; l < L; ++l) {
    const std::string o = fmt::format("model.decoder.layers.{}.mlp.", l), p = fmt::format("model.layers.{}.", l);
    expect_same(ck.read_full(o + "router.weight"), find(hub, p + "block_sparse_moe.gate.weight"), o + "router");
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = fmt::format("{}block_sparse_moe.experts.{}.", p, e);
      const std::string t = fmt::format("{}experts.local_experts.{}.", o, e);
      expect_same(ck.read_full(t + "linear_fc1.weight"), stack2(find(hub, x + "w1.weight"), find(hub, x + "w3.weight")),
                  t + "linear_fc1");
      expect_same(ck.read_full(t + "linear_fc2.weight"), find(hub, x + "w2.weight"), t + "linear_fc2");
    }
  }
  // The fused layouts give the same checkpoint tensors.
  for (const char* f : {"fused_ck", "transposed_ck"}) {
    const auto other = ckpt::CheckpointReader::open((s / f).string());
    for (const auto& n : ck.tensor_names())
      if (n.rfind("model.", 0) == 0) expect_same(ck.read_full(n), other.read_full(n), std::string(f) + " " + n);
  }
  // Identical experts: the MoE model computes the dense one.
  const auto moe = logits_of((s / "same_ck").string(), 12), mlp = logits_of((s / "dense_ck").string(), 12);
  double diff = 0, top = 0;
  for (size_t i = 0; i < moe.size(); ++i) diff = std::max(diff, double(std::fabs(moe[i] - mlp[i])));
  for (float x : mlp) top = std::max(top, double(std::fabs(x)));
  EXPECT_LT(diff, 1e-5);
  EXPECT_GT(top, 0.1);
  // But different experts differ from it (the check can fail).
  const auto routed = logits_of((s / "hub_ck").string(), 12);
  double spread = 0;
  for (size_t i = 0; i < moe.size(); ++i) spread = std::max(spread, double(std::fabs(routed[i] - mlp[i])));
  EXPECT_GT(spread, 1e-2);

  // router_jitter_noise is refused by name.
  cfg["router_jitter_noise"] = 0.01;
  write_folder(s / "noise", cfg, hub);
  EXPECT_NE(convert(s, s / "noise", s / "noise_ck"), 0);
  EXPECT_NE(slurp(s / "log").find("router_jitter_noise"), std::string::npos) << slurp(s / "log");
  if (!HasFailure()) fs::remove_all(s.dir);
}

TEST(HfMoe, Qwen2MoeHubNamesAndRefusals) {
  Scratch s("hf_moe_hub_qwen2");
  std::mt19937 g(11);
  Named w = llama_part(g);
  json cfg = llama_config("Qwen2MoeForCausalLM", "qwen2_moe");
  cfg["intermediate_size"] = Fd;
  cfg["moe_intermediate_size"] = Fe;
  cfg["shared_expert_intermediate_size"] = Fs;
  cfg["num_experts"] = E;
  cfg["num_experts_per_tok"] = K;
  cfg["norm_topk_prob"] = false;
  cfg["decoder_sparse_step"] = 2;  // layer 1 is MoE, layer 0 dense
  cfg["mlp_only_layers"] = json::array();
  for (int64_t l = 0; l < L; ++l)
    for (const auto& [n, rows] : {std::pair{"q_proj", C}, std::pair{"k_proj", G * HS}, std::pair{"v_proj", G * HS}})
      w.emplace_back(fmt::format("model.layers.{}.self_attn.{}.bias", l, n), Tensor::zeros({rows}, DType::F32));
  w.emplace_back("model.layers.0.mlp.gate_proj.weight", rnd(g, {Fd, C}, 0.3f));
  w.emplace_back("model.layers.0.mlp.up_proj.weight", rnd(g, {Fd, C}, 0.3f));
  w.emplace_back("model.layers.0.mlp.down_proj.weight", rnd(g, {C, Fd}, 0.3f));
  const std::string p = "model.layers.1.mlp.";
  w.emplace_back(p + "gate.weight", rnd(g, {E, C}, 1.f));
  for (int64_t e = 0; e < E; ++e)
    for (const auto& [n, r, c] : {std::tuple{"gate_proj", Fe, C}, std::tuple{"up_proj", Fe, C}, std::tuple{"down_proj", C, Fe}})
      w.emplace_back(fmt::format("{}experts.{}.{}.weight", p, e, n), rnd(g, {r, c}, 0.3f));
  w.emplace_back(p + "shared_expert.gate_proj.weight", rnd(g, {Fs, C}, 0.3f));
  w.emplace_back(p + "shared_expert.up_proj.weight", rnd(g, {Fs, C}, 0.3f));
  w.emplace_back(p + "shared_expert.down_proj.weight", rnd(g, {C, Fs}, 0.3f));
  w.emplace_back(p + "shared_expert_gate.weight", rnd(g, {1, C}, 0.3f));
  write_folder(s / "hub", cfg, w);
  ASSERT_EQ(convert(s, s / "hub", s / "ck"), 0) << slurp(s / "log");
  const auto ck = ckpt::CheckpointReader::open((s / "ck").string());
  const auto& m = ck.config().moe;
  EXPECT_TRUE(m.router_pre_softmax);
  EXPECT_TRUE(m.shared_expert_gate);
  EXPECT_EQ(m.shared_expert_intermediate_size, Fs);
  EXPECT_EQ(m.layer_freq, "[0,1]");
  EXPECT_EQ(m.aux_loss_coeff, 0.f);  // no output_router_logits
  EXPECT_EQ(ck.config().ffn_hidden_size, Fd);
  const std::string o = "model.decoder.layers.1.mlp.";
  expect_same(ck.read_full(o + "router.weight"), find(w, p + "gate.weight"), "router");
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = fmt::format("{}experts.{}.", p, e), t = fmt::format("{}experts.local_experts.{}.", o, e);
    expect_same(ck.read_full(t + "linear_fc1.weight"),
                stack2(find(w, x + "gate_proj.weight"), find(w, x + "up_proj.weight")), t + "linear_fc1");
    expect_same(ck.read_full(t + "linear_fc2.weight"), find(w, x + "down_proj.weight"), t + "linear_fc2");
  }
  expect_same(ck.read_full(o + "shared_experts.linear_fc1.weight"),
              stack2(find(w, p + "shared_expert.gate_proj.weight"), find(w, p + "shared_expert.up_proj.weight")),
              "shared fc1");
  expect_same(ck.read_full(o + "shared_experts.linear_fc2.weight"), find(w, p + "shared_expert.down_proj.weight"),
              "shared fc2");
  expect_same(ck.read_full(o + "shared_experts.gate_weight"), find(w, p + "shared_expert_gate.weight"), "gate");
  expect_same(ck.read_full("model.decoder.layers.0.mlp.linear_fc1.weight"),
              stack2(find(w, "model.layers.0.mlp.gate_proj.weight"), find(w, "model.layers.0.mlp.up_proj.weight")),
              "dense fc1");

  // transformers 5 saves a Qwen MoE config's expert count as num_local_experts.
  json renamed = cfg;
  renamed.erase("num_experts");
  renamed["num_local_experts"] = E;
  write_folder(s / "hub5", renamed, w);
  ASSERT_EQ(convert(s, s / "hub5", s / "ck5"), 0) << slurp(s / "log");
  EXPECT_EQ(ckpt::CheckpointReader::open((s / "ck5").string()).config().moe.num_experts, E);

  // A q/k/v bias tripod cannot hold is refused by name.
  for (auto& [n, t] : w)
    if (n == "model.layers.1.self_attn.k_proj.bias") t.data<float>()[3] = 0.5f;
  write_folder(s / "bias", cfg, w);
  EXPECT_NE(convert(s, s / "bias", s / "bias_ck"), 0);
  EXPECT_NE(slurp(s / "log").find("self_attn.k_proj.bias is not zero"), std::string::npos) << slurp(s / "log");

  // Sigmoid routing has no HF class: the export says so.
  const std::string bin = env("TRIPOD_BIN"), log = (s / "log").string();
  ASSERT_EQ(sh(bin + " train " + kLlama + "--ffn-hidden-size 48 --num-experts 4 --moe-router-topk 2 --moe-router-score-function sigmoid "
               "--train-iters 1 --save " + (s / "sig").string() + " > " + log + " 2>&1"), 0) << slurp(log);
  EXPECT_NE(sh(bin + " convert --load " + (s / "sig").string() + " --export-hf " + (s / "sig_hf").string() + " > " +
               log + " 2>&1"), 0);
  EXPECT_NE(slurp(log).find("--moe-router-score-function sigmoid"), std::string::npos) << slurp(log);
  EXPECT_FALSE(fs::exists(s / "sig_hf"));
  if (!HasFailure()) fs::remove_all(s.dir);
}

}  // namespace
