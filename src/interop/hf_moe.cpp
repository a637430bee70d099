// Implementation of interop/hf_moe.h.
#include "interop/hf_moe.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace tripod::interop {
using json = nlohmann::json;

namespace {

bool is_mixtral(const std::string& a) { return a == "MixtralForCausalLM" || a == "mixtral"; }
bool is_qwen2_moe(const std::string& a) { return a == "Qwen2MoeForCausalLM" || a == "qwen2_moe"; }
bool is_qwen3_moe(const std::string& a) { return a == "Qwen3MoeForCausalLM" || a == "qwen3_moe"; }

double json_float(float x) { return std::stod(fmt::format("{}", x)); }

// Rows [r0, r0 + n) of a (rows, cols) matrix.
Tensor rows_of(const Tensor& t, int64_t r0, int64_t n) {
  const int64_t cols = t.size(1);
  Tensor out = Tensor::empty({n, cols}, DType::F32);
  std::memcpy(out.data<float>(), t.data<float>() + r0 * cols, static_cast<size_t>(n * cols) * sizeof(float));
  return out;
}

Tensor stack_rows(const Tensor& a, const Tensor& b) {
  TRIPOD_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1), "gate and up projections of shapes {} and {}",
               shape_str(a.shape()), shape_str(b.shape()));
  Tensor out = Tensor::empty({a.size(0) + b.size(0), a.size(1)}, DType::F32);
  std::memcpy(out.data<float>(), a.data<float>(), a.nbytes());
  std::memcpy(out.data<float>() + a.numel(), b.data<float>(), b.nbytes());
  return out;
}

// Matrix e of a (E, R, K) tensor as (R, K), or of (E, K, R) transposed.
Tensor expert_matrix(const Tensor& t, int64_t e, int64_t rows, int64_t cols, bool transposed) {
  Tensor out = Tensor::empty({rows, cols}, DType::F32);
  const float* src = t.data<float>() + e * rows * cols;
  float* dst = out.data<float>();
  if (!transposed) {
    std::memcpy(dst, src, static_cast<size_t>(rows * cols) * sizeof(float));
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) dst[r * cols + k] = src[k * rows + r];
  }
  return out;
}

}  // namespace

bool is_hf_moe_architecture(const std::string& arch) {
  return is_mixtral(arch) || is_qwen2_moe(arch) || is_qwen3_moe(arch);
}

void moe_config_from_hf(const json& j, const std::string& arch, const std::string& path, config::GptConfig& c) {
  auto& m = c.moe;
  m.router_score_function = "softmax";
  m.router_topk = j.at("num_experts_per_tok").get<int64_t>();
  const float coef = j.value("router_aux_loss_coef", 0.f);
  m.aux_loss_coeff = j.value("output_router_logits", false) ? coef : 0.f;
  if (is_mixtral(arch)) {
    m.num_experts = j.at("num_local_experts").get<int64_t>();
    m.ffn_hidden_size = c.ffn_hidden_size;  // intermediate_size: the experts' width
    const double noise = j.value("router_jitter_noise", 0.0);
    TRIPOD_CHECK_HINT(noise == 0.0, "set router_jitter_noise to 0 in config.json (it only perturbs training)",
                      "{}: router_jitter_noise {} is not supported (tripod's router adds no noise)", path, noise);
    m.router_pre_softmax = false;
  } else {
    // transformers 5 writes Qwen3-MoE's expert count as num_local_experts
    // (its attribute map still answers to num_experts); older files say num_experts.
    m.num_experts = (j.contains("num_experts") ? j.at("num_experts") : j.at("num_local_experts")).get<int64_t>();
    m.ffn_hidden_size = j.at("moe_intermediate_size").get<int64_t>();
    m.router_pre_softmax = !j.value("norm_topk_prob", false);
    const int64_t fs = j.value("shared_expert_intermediate_size", int64_t{0});
    m.shared_expert_intermediate_size = fs;
    m.shared_expert_gate = fs > 0;
    TRIPOD_CHECK_HINT(!j.value("use_sliding_window", false), "set use_sliding_window false in config.json",
                      "{}: sliding-window attention is not supported", path);
    const int64_t step = j.value("decoder_sparse_step", int64_t{1});
    TRIPOD_CHECK(step >= 1, "{}: decoder_sparse_step {} must be >= 1", path, step);
    std::vector<int64_t> dense_only = j.value("mlp_only_layers", std::vector<int64_t>{});
    std::string list;
    bool all = true, any = false;
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const bool moe = (i + 1) % step == 0 && std::find(dense_only.begin(), dense_only.end(), i) == dense_only.end();
      list += fmt::format("{}{}", i ? "," : "", moe ? 1 : 0);
      all = all && moe;
      any = any || moe;
    }
    TRIPOD_CHECK_HINT(any, "import it as LlamaForCausalLM-shaped weights instead",
                      "{}: decoder_sparse_step / mlp_only_layers leave no MoE layer", path);
    m.layer_freq = all ? std::string("1") : fmt::format("[{}]", list);
  }
  if (j.contains("sliding_window") && !j["sliding_window"].is_null() &&
      (is_mixtral(arch) || j.value("use_sliding_window", false)))
    TRIPOD_CHECK_HINT(j["sliding_window"].get<int64_t>() >= c.max_position_embeddings,
                      "set sliding_window null in config.json (tripod's attention is full causal)",
                      "{}: sliding_window {} is shorter than max_position_embeddings {}; not supported", path,
                      j["sliding_window"].get<int64_t>(), c.max_position_embeddings);
}

std::string hf_moe_architecture(const config::GptConfig& c, const std::string& source) {
  const auto& m = c.moe;
  auto refuse = [&](const std::string& why) {
    TRIPOD_FAIL("{} cannot be written as MixtralForCausalLM, Qwen2MoeForCausalLM or Qwen3MoeForCausalLM: {}", source,
                why);
  };
  if (m.sigmoid()) refuse("--moe-router-score-function sigmoid (both use softmax routing)");
  if (m.router_enable_expert_bias) refuse("--moe-router-enable-expert-bias (no expert bias in either)");
  if (m.router_topk_scaling_factor != 0.f && m.router_topk_scaling_factor != 1.f)
    refuse("--moe-router-topk-scaling-factor (no scaling in either)");
  if (c.add_bias_linear) refuse("the linears have biases (use --disable-bias-linear)");
  if (!c.swiglu) refuse("the experts are not SwiGLU (--swiglu)");
  if (m.shared_expert_intermediate_size > 0 && !m.shared_expert_gate)
    refuse("a shared expert without --moe-shared-expert-gate (Qwen2-MoE's shared expert is gated)");
  if (c.qk_layernorm) {  // Qwen3-MoE: q_norm / k_norm, no shared expert, dense layers by mlp_only_layers
    if (m.shared_expert_intermediate_size > 0) refuse("a shared expert with --qk-layernorm (Qwen3-MoE has none)");
    return "Qwen3MoeForCausalLM";
  }
  bool all_moe = true;
  for (int64_t l = 0; l < c.num_layers; ++l) all_moe = all_moe && c.layer_spec(l).moe();
  if (m.shared_expert_intermediate_size > 0) return "Qwen2MoeForCausalLM";
  if (m.router_pre_softmax) refuse("--moe-router-pre-softmax without a shared expert (Qwen2-MoE has one)");
  if (!all_moe) refuse("dense layers (--moe-layer-freq) without a shared expert (Mixtral is MoE in every layer)");
  return "MixtralForCausalLM";
}

void moe_config_to_hf(const config::GptConfig& c, json& cfg) {
  const auto& m = c.moe;
  const std::string arch = hf_moe_architecture(c, "the checkpoint");
  cfg["architectures"] = {arch};
  cfg["num_experts_per_tok"] = m.router_topk;
  // A checkpoint does not carry the coefficient (a training flag): mostly
  // output_router_logits false and transformers' default coefficient.
  cfg["output_router_logits"] = m.balancing_coeff() > 0.f;
  if (m.balancing_coeff() > 0.f) cfg["router_aux_loss_coef"] = json_float(m.balancing_coeff());
  if (arch == "Qwen3MoeForCausalLM") {
    cfg.erase("mlp_bias");  // Qwen3-MoE keeps head_dim and attention_bias (false)
  } else {
    for (const char* k : {"head_dim", "attention_bias", "mlp_bias"}) cfg.erase(k);
  }
  if (arch == "MixtralForCausalLM") {
    cfg["model_type"] = "mixtral";
    cfg["num_local_experts"] = m.num_experts;
    cfg["intermediate_size"] = m.ffn_hidden_size;
    cfg["router_jitter_noise"] = 0.0;
    cfg["sliding_window"] = nullptr;
    return;
  }
  const bool qwen3 = arch == "Qwen3MoeForCausalLM";
  cfg["model_type"] = qwen3 ? "qwen3_moe" : "qwen2_moe";
  cfg["num_experts"] = m.num_experts;
  cfg["moe_intermediate_size"] = m.ffn_hidden_size;
  cfg["intermediate_size"] = c.ffn_hidden_size;
  if (!qwen3) cfg["shared_expert_intermediate_size"] = m.shared_expert_intermediate_size;
  cfg["norm_topk_prob"] = !m.router_pre_softmax;
  cfg["decoder_sparse_step"] = 1;
  std::vector<int64_t> dense;
  for (int64_t l = 0; l < c.num_layers; ++l)
    if (!c.layer_spec(l).moe()) dense.push_back(l);
  cfg["mlp_only_layers"] = dense;
  cfg["use_sliding_window"] = false;
  cfg["sliding_window"] = nullptr;
  cfg["max_window_layers"] = c.num_layers;
}

void moe_layer_to_hf(const config::GptConfig& c, int64_t layer, const std::function<Tensor(const std::string&)>& read,
                     std::vector<std::pair<std::string, Tensor>>& out) {
  const auto& m = c.moe;
  const bool mixtral = hf_moe_architecture(c, "the checkpoint") == "MixtralForCausalLM";
  const std::string ours = fmt::format("decoder.layers.{}.mlp.", layer);
  const std::string theirs = fmt::format("model.layers.{}.{}", layer, mixtral ? "block_sparse_moe." : "mlp.");
  const int64_t Fe = m.ffn_hidden_size;
  out.emplace_back(theirs + "gate.weight", read(ours + "router.weight"));
  const char* gate = mixtral ? "w1" : "gate_proj";
  const char* up = mixtral ? "w3" : "up_proj";
  const char* down = mixtral ? "w2" : "down_proj";
  for (int64_t e = 0; e < m.num_experts; ++e) {
    const std::string o = fmt::format("{}experts.local_experts.{}.", ours, e);
    const std::string t = fmt::format("{}experts.{}.", theirs, e);
    const Tensor fc1 = read(o + "linear_fc1.weight");  // [gate | up]
    out.emplace_back(t + gate + ".weight", rows_of(fc1, 0, Fe));
    out.emplace_back(t + up + ".weight", rows_of(fc1, Fe, Fe));
    out.emplace_back(t + down + ".weight", read(o + "linear_fc2.weight"));
  }
  if (m.shared_expert_intermediate_size > 0) {
    const int64_t Fs = m.shared_expert_intermediate_size;
    const Tensor fc1 = read(ours + "shared_experts.linear_fc1.weight");
    out.emplace_back(theirs + "shared_expert.gate_proj.weight", rows_of(fc1, 0, Fs));
    out.emplace_back(theirs + "shared_expert.up_proj.weight", rows_of(fc1, Fs, Fs));
    out.emplace_back(theirs + "shared_expert.down_proj.weight", read(ours + "shared_experts.linear_fc2.weight"));
    out.emplace_back(theirs + "shared_expert_gate.weight", read(ours + "shared_experts.gate_weight"));
  }
}

bool HfMoeTensors::is_moe_tensor(const std::string& suffix) {
  for (const char* p : {"mlp.router.", "mlp.experts.", "mlp.shared_experts."})
    if (suffix.rfind(p, 0) == 0) return true;
  return false;
}

Tensor HfMoeTensors::fused(const std::string& name) {
  if (cached_name_ != name) {
    cached_ = st_.read_f32(name);
    cached_name_ = name;
  }
  return cached_;
}

Tensor HfMoeTensors::read(int64_t layer, const std::string& suffix) {
  const std::string& path = st_.describe();
  const std::string base = fmt::format("model.layers.{}.", layer);
  // Mixtral's hub files say block_sparse_moe., recent transformers mlp.
  const bool hub_mixtral = st_.contains(fmt::format("{}block_sparse_moe.gate.weight", base));
  const std::string p = fmt::format("{}{}", base, hub_mixtral ? "block_sparse_moe." : "mlp.");
  auto get = [&](const std::string& n) {
    TRIPOD_CHECK_HINT(st_.contains(n), "import a MixtralForCausalLM or Qwen2MoeForCausalLM save_pretrained folder",
                      "{}: no tensor {} (layer {} is an MoE layer by config.json)", path, n, layer);
    return st_.read_f32(n);
  };
  const int64_t C = c_.hidden_size, Fe = c_.moe.ffn_hidden_size;
  if (suffix == "mlp.router.weight") return get(p + "gate.weight");
  if (suffix.rfind("mlp.shared_experts.", 0) == 0) {
    const std::string s = base + "mlp.shared_expert.";
    if (suffix == "mlp.shared_experts.linear_fc1.weight")
      return stack_rows(get(s + "gate_proj.weight"), get(s + "up_proj.weight"));
    if (suffix == "mlp.shared_experts.linear_fc2.weight") return get(s + "down_proj.weight");
    if (suffix == "mlp.shared_experts.gate_weight") return get(base + "mlp.shared_expert_gate.weight");
  }
  const std::string head = "mlp.experts.local_experts.";
  TRIPOD_CHECK(suffix.rfind(head, 0) == 0, "no Hugging Face name for decoder.layers.{}.{}", layer, suffix);
  const auto dot = suffix.find('.', head.size());
  const int64_t e = std::stoll(suffix.substr(head.size(), dot - head.size()));
  const bool fc1 = suffix.substr(dot + 1) == "linear_fc1.weight";
  TRIPOD_CHECK(fc1 || suffix.substr(dot + 1) == "linear_fc2.weight", "no Hugging Face name for decoder.layers.{}.{}",
               layer, suffix);
  const std::string x = fmt::format("{}experts.{}.", p, e);
  if (st_.contains(x + "w1.weight") || st_.contains(x + "w2.weight"))  // Mixtral's hub names
    return fc1 ? stack_rows(get(x + "w1.weight"), get(x + "w3.weight")) : get(x + "w2.weight");
  if (st_.contains(x + "gate_proj.weight") || st_.contains(x + "down_proj.weight"))  // Qwen2-MoE's
    return fc1 ? stack_rows(get(x + "gate_proj.weight"), get(x + "up_proj.weight")) : get(x + "down_proj.weight");
  // The fused layout: gate_up_proj (E, 2Fe, C), down_proj (E, C, Fe), or transposed.
  const std::string n = p + (fc1 ? "experts.gate_up_proj" : "experts.down_proj");
  TRIPOD_CHECK_HINT(st_.contains(n), "import a MixtralForCausalLM or Qwen2MoeForCausalLM save_pretrained folder",
                    "{}: expert {} of layer {} is in no known layout (neither {}w1/w2/w3, {}gate_proj/up_proj/down_proj "
                    "nor {})", path, e, layer, x, x, n);
  const Tensor t = fused(n);
  const int64_t rows = fc1 ? 2 * Fe : C, cols = fc1 ? C : Fe, E = c_.moe.num_experts;
  TRIPOD_CHECK(t.dim() == 3 && t.size(0) == E, "{}: {} has shape {}, expected ({}, ...) from config.json", path, n,
               shape_str(t.shape()), E);
  const bool plain = t.size(1) == rows && t.size(2) == cols, transposed = t.size(1) == cols && t.size(2) == rows;
  TRIPOD_CHECK(plain || transposed, "{}: {} has shape {}, expected ({}, {}, {}) from config.json", path, n,
               shape_str(t.shape()), E, rows, cols);
  return expert_matrix(t, e, rows, cols, !plain);
}

void HfMoeTensors::check_zero_qkv_bias(int64_t layer) const {
  for (const char* w : {"q_proj", "k_proj", "v_proj"}) {
    const std::string n = fmt::format("model.layers.{}.self_attn.{}.bias", layer, w);
    if (!st_.contains(n)) continue;
    const Tensor b = st_.read_f32(n);
    for (int64_t i = 0; i < b.numel(); ++i)
      TRIPOD_CHECK_HINT(b.data<float>()[i] == 0.f,
                        "tripod's attention has no q/k/v biases without the output projection's (no --add-qkv-bias); "
                        "only a model whose q/k/v biases are zero imports",
                        "{}: {} is not zero ({} at {})", st_.path_of(n), n, b.data<float>()[i], i);
  }
}

}  // namespace tripod::interop
