// Implementation of interop/hf_llama.h.
#include "interop/hf_llama.h"

#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "ckpt/atomic_io.h"
#include "ckpt/reshard.h"
#include "interop/hf_moe.h"
#include "model/gpt_model.h"

namespace tripod::interop {
namespace fs = std::filesystem;
using ckpt::CheckpointReader;
using ckpt::ShardTensor;
using ckpt::config_to_json;
using ckpt::fit_rows;
using ckpt::read_text;
using ckpt::save_unsharded;
using ckpt::write_text_atomic;
using json = nlohmann::json;

namespace {

// Row blocks of a tensor viewed as (rows, cols): copies `n` rows.
void copy_rows(Tensor& dst, int64_t dst_row, const Tensor& src, int64_t src_row, int64_t n, int64_t cols) {
  std::memcpy(dst.data<float>() + dst_row * cols, src.data<float>() + src_row * cols,
              static_cast<size_t>(n * cols) * sizeof(float));
}

// A float as the shortest decimal that reads back as it (1e-05, not 9.99999974e-06).
double json_float(float x) { return std::stod(fmt::format("{}", x)); }

Shape rows_shape(int64_t rows, int64_t cols, bool matrix) { return matrix ? Shape{rows, cols} : Shape{rows}; }

// tripod's fused qkv (global layout, see the header) -> HF q, k, v.
void split_qkv(const config::GptConfig& c, const Tensor& qkv, bool matrix, Tensor& q, Tensor& k, Tensor& v) {
  const int64_t G = c.query_groups(), HS = c.head_size(), kh = c.num_attention_heads / G;
  const int64_t cols = matrix ? c.hidden_size : 1;
  q = Tensor::empty(rows_shape(G * kh * HS, cols, matrix), DType::F32);
  k = Tensor::empty(rows_shape(G * HS, cols, matrix), DType::F32);
  v = Tensor::empty(rows_shape(G * HS, cols, matrix), DType::F32);
  if (!c.group_query_attention) {  // [Q | K | V]
    const int64_t C = c.hidden_size;
    copy_rows(q, 0, qkv, 0, C, cols);
    copy_rows(k, 0, qkv, C, C, cols);
    copy_rows(v, 0, qkv, 2 * C, C, cols);
    return;
  }
  for (int64_t g = 0; g < G; ++g) {
    const int64_t base = g * (kh + 2) * HS;
    copy_rows(q, g * kh * HS, qkv, base, kh * HS, cols);
    copy_rows(k, g * HS, qkv, base + kh * HS, HS, cols);
    copy_rows(v, g * HS, qkv, base + (kh + 1) * HS, HS, cols);
  }
}

// The inverse: HF q, k, v -> tripod's fused qkv of shape `shape`.
Tensor fuse_qkv(const config::GptConfig& c, const Shape& shape, const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t G = c.query_groups(), HS = c.head_size(), kh = c.num_attention_heads / G;
  const bool matrix = q.dim() == 2;
  const int64_t cols = matrix ? c.hidden_size : 1;
  Tensor out = Tensor::empty(shape, DType::F32);
  if (!c.group_query_attention) {
    const int64_t C = c.hidden_size;
    copy_rows(out, 0, q, 0, C, cols);
    copy_rows(out, C, k, 0, C, cols);
    copy_rows(out, 2 * C, v, 0, C, cols);
    return out;
  }
  for (int64_t g = 0; g < G; ++g) {
    const int64_t base = g * (kh + 2) * HS;
    copy_rows(out, base, q, g * kh * HS, kh * HS, cols);
    copy_rows(out, base + kh * HS, k, g * HS, HS, cols);
    copy_rows(out, base + (kh + 1) * HS, v, g * HS, HS, cols);
  }
  return out;
}

// Rows [r0, r0 + n) of a 1-D or 2-D tensor.
Tensor slice_rows(const Tensor& t, int64_t r0, int64_t n) {
  const int64_t cols = t.dim() == 2 ? t.size(1) : 1;
  Tensor out = Tensor::empty(rows_shape(n, cols, t.dim() == 2), DType::F32);
  copy_rows(out, 0, t, r0, n, cols);
  return out;
}

Tensor concat_rows(const Tensor& a, const Tensor& b) {
  const int64_t cols = a.dim() == 2 ? a.size(1) : 1;
  Tensor out = Tensor::empty(rows_shape(a.size(0) + b.size(0), cols, a.dim() == 2), DType::F32);
  copy_rows(out, 0, a, 0, a.size(0), cols);
  copy_rows(out, a.size(0), b, 0, b.size(0), cols);
  return out;
}

// (tripod name suffix in a layer, HF name suffix) for the one-to-one tensors.
const std::pair<const char*, const char*> kLayerNames[] = {
    {"input_layernorm.weight", "input_layernorm.weight"},
    {"self_attention.linear_proj.weight", "self_attn.o_proj.weight"},
    {"self_attention.linear_proj.bias", "self_attn.o_proj.bias"},
    {"self_attention.q_layernorm.weight", "self_attn.q_norm.weight"},  // Qwen3 (--qk-layernorm)
    {"self_attention.k_layernorm.weight", "self_attn.k_norm.weight"},
    {"pre_mlp_layernorm.weight", "post_attention_layernorm.weight"},
    {"mlp.linear_fc2.weight", "mlp.down_proj.weight"},
    {"mlp.linear_fc2.bias", "mlp.down_proj.bias"},
};

config::GptConfig config_from_hf(const std::string& path, const std::string& arch) {
  json j = json::parse(read_text(path), nullptr, false);
  TRIPOD_CHECK(!j.is_discarded() && j.is_object(), "{}: not valid JSON", path);
  config::GptConfig c;
  try {
    const std::string act = j.value("hidden_act", "silu");
    TRIPOD_CHECK(act == "silu", "{}: hidden_act '{}' is not supported (tripod's gated MLP is SwiGLU: silu)", path,
                 act);
    // transformers 4 writes rope_theta (and rope_scaling null); 5 writes
    // rope_parameters {rope_type, rope_theta}. Only plain RoPE is taken.
    auto plain_rope = [&](const char* key) {
      if (!j.contains(key) || j[key].is_null()) return;
      const std::string type = j[key].value("rope_type", j[key].value("type", std::string("default")));
      TRIPOD_CHECK(type == "default", "{}: {} of type '{}' is not supported (plain RoPE only)", path, key, type);
    };
    plain_rope("rope_scaling");
    plain_rope("rope_parameters");
    c.hidden_size = j.at("hidden_size").get<int64_t>();
    c.num_layers = j.at("num_hidden_layers").get<int64_t>();
    c.num_attention_heads = j.at("num_attention_heads").get<int64_t>();
    const int64_t kv = j.value("num_key_value_heads", c.num_attention_heads);
    if (j.contains("head_dim") && !j["head_dim"].is_null())
      TRIPOD_CHECK_HINT(j["head_dim"].get<int64_t>() == c.hidden_size / c.num_attention_heads,
                        "tripod's head size is --hidden-size / --num-attention-heads (no --kv-channels of another "
                        "value); only such models import",
                        "{}: head_dim {} differs from hidden_size / num_attention_heads = {} / {}; not supported", path,
                        j["head_dim"].get<int64_t>(), c.hidden_size, c.num_attention_heads);
    c.group_query_attention = kv != c.num_attention_heads;
    c.num_query_groups = c.group_query_attention ? kv : 0;
    c.ffn_hidden_size = j.at("intermediate_size").get<int64_t>();
    c.max_position_embeddings = j.at("max_position_embeddings").get<int64_t>();
    c.seq_length = c.max_position_embeddings;
    c.vocab_size = j.at("vocab_size").get<int64_t>();
    c.layernorm_epsilon = j.value("rms_norm_eps", 1e-6f);
    c.rotary_base = j.value("rope_theta", 10000.f);
    if (j.contains("rope_parameters") && j["rope_parameters"].is_object() &&
        j["rope_parameters"].contains("rope_theta"))
      c.rotary_base = j["rope_parameters"]["rope_theta"].get<float>();
    c.init_method_std = j.value("initializer_range", 0.02f);
    c.untie_embeddings_and_output_weights = !j.value("tie_word_embeddings", false);
    const bool attn_bias = j.value("attention_bias", false), mlp_bias = j.value("mlp_bias", false);
    TRIPOD_CHECK(attn_bias == mlp_bias,
                 "{}: attention_bias {} and mlp_bias {} differ; tripod's biases are all on or all off "
                 "(--disable-bias-linear)", path, attn_bias, mlp_bias);
    c.add_bias_linear = attn_bias;
    c.qk_layernorm = is_hf_qwen3_architecture(arch);
    if (c.qk_layernorm) {
      TRIPOD_CHECK_HINT(!j.value("use_sliding_window", false), "set use_sliding_window false in config.json",
                        "{}: sliding-window attention is not supported", path);
      TRIPOD_CHECK(!attn_bias, "{}: attention_bias true is not supported for {} (tripod's biases are all on or all "
                   "off, and its MLP has none)", path, arch);
    }
    if (is_hf_moe_architecture(arch)) moe_config_from_hf(j, arch, path, c);
  } catch (const json::exception& e) {
    TRIPOD_FAIL("{}: missing or malformed {} field: {}", path, arch, e.what());
  }
  c.position_embedding_type = config::GptConfig::Position::Rope;
  c.normalization = config::GptConfig::Norm::RMSNorm;
  c.swiglu = true;
  c.make_vocab_size_divisible_by = 128;
  c.finalize();
  return c;
}

}  // namespace

bool is_hf_qwen3_architecture(const std::string& arch) {
  return arch == "Qwen3ForCausalLM" || arch == "qwen3" || arch == "Qwen3MoeForCausalLM" || arch == "qwen3_moe";
}

bool is_hf_llama_architecture(const std::string& arch) {
  return arch == "LlamaForCausalLM" || arch == "llama" || is_hf_qwen3_architecture(arch) ||
         is_hf_moe_architecture(arch);
}

bool is_hf_llama(const config::GptConfig& c, std::string* why) {
  auto no = [&](const char* w) {
    if (why) *why = w;
    return false;
  };
  if (!c.rmsnorm()) return no("the model uses LayerNorm (Llama: --normalization RMSNorm)");
  if (!c.rope()) return no("the model has no RoPE (Llama: --position-embedding-type rope)");
  if (c.rotary_dim() != c.head_size()) return no("--rotary-percent is below 1 (LlamaForCausalLM rotates whole heads)");
  if (!c.swiglu) return no("the MLP is not SwiGLU (Llama: --swiglu)");
  return true;
}

std::string hf_architecture(const std::string& in_dir) {
  const std::string path = (fs::path(in_dir) / "config.json").string();
  TRIPOD_CHECK_HINT(fs::exists(path), "point --import-hf at a folder written by save_pretrained",
                    "{} does not exist", path);
  json j = json::parse(read_text(path), nullptr, false);
  TRIPOD_CHECK(!j.is_discarded() && j.is_object(), "{}: not valid JSON", path);
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty())
    return j["architectures"][0].get<std::string>();
  return j.value("model_type", "");
}

void export_hf_llama(const CheckpointReader& reader, const std::string& out_dir, uint64_t max_shard_size) {
  config::GptConfig c = reader.config();
  c.finalize();
  std::string why;
  TRIPOD_CHECK_HINT(is_hf_llama(c, &why), "export GPT-2 models with the same command: it picks GPT2LMHeadModel",
                    "{} cannot be written as LlamaForCausalLM: {}", reader.path(), why);
  const std::string arch = c.moe.enabled() ? hf_moe_architecture(c, reader.path())
                           : c.qk_layernorm  ? "Qwen3ForCausalLM"
                                             : "LlamaForCausalLM";
  TRIPOD_CHECK_HINT(!c.qk_layernorm || !c.add_bias_linear, "train the model with --disable-bias-linear",
                    "{} cannot be written as {}: its linears have biases (Qwen3's have none)", reader.path(), arch);
  const Shape vocab_rows{c.vocab_size, c.hidden_size};
  std::vector<std::pair<std::string, Tensor>> out;
  auto read = [&](const std::string& n) { return reader.read_full("model." + n); };
  out.emplace_back("model.embed_tokens.weight",
                   fit_rows(read("embedding.word_embeddings.weight"), vocab_rows, nullptr, "word_embeddings"));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string ours = fmt::format("decoder.layers.{}.", l), theirs = fmt::format("model.layers.{}.", l);
    for (const auto& [o, t] : kLayerNames) {
      const std::string n = ours + o;
      if (reader.has("model." + n)) out.emplace_back(theirs + t, read(n));
    }
    for (const char* kind : {"weight", "bias"}) {
      const std::string qkv_name = ours + "self_attention.linear_qkv." + kind;
      if (!reader.has("model." + qkv_name)) continue;
      Tensor q, k, v;
      split_qkv(c, read(qkv_name), std::string(kind) == "weight", q, k, v);
      out.emplace_back(theirs + "self_attn.q_proj." + kind, q);
      out.emplace_back(theirs + "self_attn.k_proj." + kind, k);
      out.emplace_back(theirs + "self_attn.v_proj." + kind, v);
      if (!reader.has("model." + ours + "mlp.linear_fc1." + kind)) continue;  // an MoE layer
      const Tensor fc1 = read(ours + "mlp.linear_fc1." + kind);  // [gate | up]
      const int64_t F = c.ffn_hidden_size;
      out.emplace_back(theirs + "mlp.gate_proj." + kind, slice_rows(fc1, 0, F));
      out.emplace_back(theirs + "mlp.up_proj." + kind, slice_rows(fc1, F, F));
    }
    if (c.layer_spec(l).moe()) moe_layer_to_hf(c, l, read, out);
    if (arch == "Qwen2MoeForCausalLM")  // its q/k/v projections have biases: zero
      for (const auto& [w, rows] : {std::pair{"q_proj", c.num_attention_heads}, std::pair{"k_proj", c.query_groups()},
                                    std::pair{"v_proj", c.query_groups()}})
        out.emplace_back(theirs + "self_attn." + w + ".bias", Tensor::zeros({rows * c.head_size()}, DType::F32));
  }
  out.emplace_back("model.norm.weight", read("decoder.final_layernorm.weight"));
  if (c.untie_embeddings_and_output_weights)
    out.emplace_back("lm_head.weight", fit_rows(read("output_layer.weight"), vocab_rows, nullptr, "output_layer"));
  fs::create_directories(out_dir);
  write_hf_weights(out_dir, out, max_shard_size);
  json cfg = {{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"vocab_size", c.vocab_size},
              {"hidden_size", c.hidden_size},
              {"intermediate_size", c.ffn_hidden_size},
              {"num_hidden_layers", c.num_layers},
              {"num_attention_heads", c.num_attention_heads},
              {"num_key_value_heads", c.query_groups()},
              {"head_dim", c.head_size()},
              {"hidden_act", "silu"},
              {"max_position_embeddings", c.max_position_embeddings},
              {"rms_norm_eps", json_float(c.layernorm_epsilon)},
              {"rope_theta", json_float(c.rotary_base)},
              {"rope_scaling", nullptr},
              {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", json_float(c.rotary_base)}}},
              {"attention_bias", c.add_bias_linear},
              {"mlp_bias", c.add_bias_linear},
              {"attention_dropout", json_float(c.attention_dropout)},
              {"initializer_range", json_float(c.init_method_std)},
              {"tie_word_embeddings", !c.untie_embeddings_and_output_weights},
              {"torch_dtype", "float32"}};
  if (c.moe.enabled()) {
    moe_config_to_hf(c, cfg);
  } else if (c.qk_layernorm) {  // Qwen3: q_norm / k_norm, no biases, head_dim written
    cfg["architectures"] = {"Qwen3ForCausalLM"};
    cfg["model_type"] = "qwen3";
    cfg.erase("mlp_bias");
    cfg["use_sliding_window"] = false;
    cfg["sliding_window"] = nullptr;
    cfg["max_window_layers"] = c.num_layers;
  }
  write_text_atomic((fs::path(out_dir) / "config.json").string(), cfg.dump(2) + "\n");
}

config::GptConfig import_hf_llama(const std::string& in_dir, const std::string& save_dir, const json& extra) {
  const std::string arch = hf_architecture(in_dir);
  const config::GptConfig c = config_from_hf((fs::path(in_dir) / "config.json").string(), arch);
  const HfWeights st = HfWeights::open(in_dir);
  const std::string& st_path = st.describe();
  auto get = [&](const std::string& name) {
    TRIPOD_CHECK(st.contains(name), "{}: no tensor {} (is it a {} checkpoint?)", st_path, name, arch);
    return st.read_f32(name);
  };
  const int64_t vp = c.padded_vocab_size(1), F = c.ffn_hidden_size;
  std::vector<ShardTensor> tensors;
  HfMoeTensors moe(st, c);
  if (is_hf_moe_architecture(arch))
    for (int64_t l = 0; l < c.num_layers; ++l) moe.check_zero_qkv_bias(l);
  for (const auto& spec : model::GptModel::all_param_specs(c, vp)) {
    const std::string& n = spec.name;
    Tensor t;
    if (n == "embedding.word_embeddings.weight" || n == "output_layer.weight") {
      t = get(n == "output_layer.weight" ? "lm_head.weight" : "model.embed_tokens.weight");
      Tensor init = model::init_full(spec, 0, c.init_method_std, c.num_layers);
      t = fit_rows(t, spec.global_shape, &init, n);
    } else if (n == "decoder.final_layernorm.weight") {
      t = get("model.norm.weight");
    } else {
      const auto dot = n.find('.', std::strlen("decoder.layers."));
      const std::string layer = n.substr(std::strlen("decoder.layers."), dot - std::strlen("decoder.layers."));
      const std::string suffix = n.substr(dot + 1), theirs = "model.layers." + layer + ".";
      const std::string kind = suffix.substr(suffix.rfind('.') + 1);  // weight | bias
      if (HfMoeTensors::is_moe_tensor(suffix)) {
        t = moe.read(std::stoll(layer), suffix);
      } else if (suffix.rfind("self_attention.linear_qkv.", 0) == 0) {
        t = fuse_qkv(c, spec.global_shape, get(theirs + "self_attn.q_proj." + kind),
                     get(theirs + "self_attn.k_proj." + kind), get(theirs + "self_attn.v_proj." + kind));
      } else if (suffix.rfind("mlp.linear_fc1.", 0) == 0) {
        t = concat_rows(get(theirs + "mlp.gate_proj." + kind), get(theirs + "mlp.up_proj." + kind));
        TRIPOD_CHECK(t.size(0) == 2 * F, "{}: gate_proj/up_proj have {} rows, expected intermediate_size {}",
                     st_path, t.size(0) / 2, F);
      } else {
        std::string hf;
        for (const auto& [o, th] : kLayerNames)
          if (suffix == o) hf = theirs + th;
        TRIPOD_CHECK(!hf.empty(), "no Hugging Face name for {}", n);
        t = get(hf);
      }
    }
    TRIPOD_CHECK(shape_numel(t.shape()) == shape_numel(spec.global_shape),
                 "{}: tensor for {} has shape {}, expected {} from config.json", st_path, n, shape_str(t.shape()),
                 shape_str(spec.global_shape));
    Tensor g = Tensor::empty(spec.global_shape, DType::F32);
    std::memcpy(g.raw(), t.raw(), g.nbytes());
    // Saved as tp rank 0 of 1: the local layout (a grouped qkv's differs).
    tensors.push_back({"model." + n, spec.global_shape, spec.shard, model::take_shard(g, spec.shard, 1, 0)});
  }
  json meta = extra;
  meta["model"] = config_to_json(c);
  meta["consumed_samples"] = 0;
  meta["optimizer"] = {{"saved", false}, {"steps", 0}};
  meta["source"] = "imported from Hugging Face " + (arch.empty() ? std::string("LlamaForCausalLM") : arch) + " " + in_dir;
  save_unsharded(save_dir, 0, tensors, meta);
  return c;
}

}  // namespace tripod::interop
