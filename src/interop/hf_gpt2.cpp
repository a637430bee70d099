// Implementation of interop/hf_gpt2.h.
#include "interop/hf_gpt2.h"

#include <filesystem>
#include <regex>

#include "base/error.h"
#include "ckpt/atomic_io.h"
#include "ckpt/reshard.h"
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

Tensor transpose2d(const Tensor& t) {
  TRIPOD_CHECK(t.dim() == 2, "transpose of a {}-d tensor", t.dim());
  const int64_t r = t.size(0), c = t.size(1);
  Tensor out = Tensor::empty({c, r}, DType::F32);
  const float* s = t.data<float>();
  float* d = out.data<float>();
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) d[j * r + i] = s[i * c + j];
  return out;
}

const std::pair<const char*, const char*> kLayerNames[] = {
    {"input_layernorm.weight", "ln_1.weight"},
    {"input_layernorm.bias", "ln_1.bias"},
    {"self_attention.linear_qkv.weight", "attn.c_attn.weight"},
    {"self_attention.linear_qkv.bias", "attn.c_attn.bias"},
    {"self_attention.linear_proj.weight", "attn.c_proj.weight"},
    {"self_attention.linear_proj.bias", "attn.c_proj.bias"},
    {"pre_mlp_layernorm.weight", "ln_2.weight"},
    {"pre_mlp_layernorm.bias", "ln_2.bias"},
    {"mlp.linear_fc1.weight", "mlp.c_fc.weight"},
    {"mlp.linear_fc1.bias", "mlp.c_fc.bias"},
    {"mlp.linear_fc2.weight", "mlp.c_proj.weight"},
    {"mlp.linear_fc2.bias", "mlp.c_proj.bias"},
};

}  // namespace

std::string hf_name(const std::string& n, bool* transposed) {
  *transposed = false;
  if (n == "embedding.word_embeddings.weight") return "wte.weight";
  if (n == "embedding.position_embeddings.weight") return "wpe.weight";
  if (n == "decoder.final_layernorm.weight") return "ln_f.weight";
  if (n == "decoder.final_layernorm.bias") return "ln_f.bias";
  static const std::regex layer(R"(decoder\.layers\.(\d+)\.(.+))");
  std::smatch m;
  if (!std::regex_match(n, m, layer)) return "";
  for (const auto& [ours, theirs] : kLayerNames)
    if (m[2] == ours) {
      *transposed = m[2].str().find(".weight") != std::string::npos && m[2].str().find("layernorm") == std::string::npos;
      return "h." + m[1].str() + "." + theirs;
    }
  return "";
}

void export_hf_gpt2(const CheckpointReader& reader, const std::string& out_dir, uint64_t max_shard_size) {
  config::GptConfig c = reader.config();
  c.finalize();
  const int64_t saved_vp = reader.info("model.embedding.word_embeddings.weight").global_shape.at(0);
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& spec : model::GptModel::all_param_specs(c, saved_vp)) {
    bool tr = false;
    const std::string name = hf_name(spec.name, &tr);
    TRIPOD_CHECK(!name.empty(), "no Hugging Face name for {}", spec.name);
    Tensor full = reader.read_full("model." + spec.name);
    if (name == "wte.weight") full = fit_rows(full, {c.vocab_size, c.hidden_size}, nullptr, spec.name);
    out.emplace_back(name, tr ? transpose2d(full) : full);
  }
  fs::create_directories(out_dir);
  write_hf_weights(out_dir, out, max_shard_size);
  json cfg = {{"architectures", {"GPT2LMHeadModel"}},
              {"model_type", "gpt2"},
              {"vocab_size", c.vocab_size},
              {"n_positions", c.max_position_embeddings},
              {"n_ctx", c.max_position_embeddings},
              {"n_embd", c.hidden_size},
              {"n_layer", c.num_layers},
              {"n_head", c.num_attention_heads},
              {"n_inner", c.ffn_hidden_size == 4 * c.hidden_size ? json(nullptr) : json(c.ffn_hidden_size)},
              {"activation_function", "gelu_new"},
              {"layer_norm_epsilon", c.layernorm_epsilon},
              {"initializer_range", c.init_method_std},
              {"resid_pdrop", c.hidden_dropout},
              {"embd_pdrop", c.hidden_dropout},
              {"attn_pdrop", c.attention_dropout},
              {"tie_word_embeddings", true},
              {"torch_dtype", "float32"}};
  write_text_atomic((fs::path(out_dir) / "config.json").string(), cfg.dump(2) + "\n");
}

static config::GptConfig config_from_hf(const std::string& path) {
  json j = json::parse(read_text(path), nullptr, false);
  TRIPOD_CHECK(!j.is_discarded() && j.is_object(), "{}: not valid JSON", path);
  config::GptConfig c;
  try {
    const std::string act = j.value("activation_function", "gelu_new");
    TRIPOD_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", "{}: activation_function '{}' is not supported "
                 "(tripod's GELU is the tanh approximation, gelu_new)", path, act);
    c.hidden_size = j.at("n_embd").get<int64_t>();
    c.num_layers = j.at("n_layer").get<int64_t>();
    c.num_attention_heads = j.at("n_head").get<int64_t>();
    c.max_position_embeddings = j.at("n_positions").get<int64_t>();
    c.seq_length = c.max_position_embeddings;
    c.vocab_size = j.at("vocab_size").get<int64_t>();
    c.ffn_hidden_size = j.contains("n_inner") && !j["n_inner"].is_null() ? j["n_inner"].get<int64_t>() : 0;
    c.layernorm_epsilon = j.value("layer_norm_epsilon", 1e-5f);
    c.init_method_std = j.value("initializer_range", 0.02f);
  } catch (const json::exception& e) {
    TRIPOD_FAIL("{}: missing or malformed GPT-2 field: {}", path, e.what());
  }
  c.finalize();
  return c;
}

config::GptConfig import_hf_gpt2(const std::string& in_dir, const std::string& save_dir, const json& extra) {
  const config::GptConfig c = config_from_hf((fs::path(in_dir) / "config.json").string());
  const HfWeights st = HfWeights::open(in_dir);
  // Checkpoints from transformers' GPT2LMHeadModel prefix the names with "transformer.".
  auto lookup = [&](const std::string& name) -> std::string {
    if (st.contains(name)) return name;
    if (st.contains("transformer." + name)) return "transformer." + name;
    TRIPOD_FAIL("{}: no tensor {} (is it a GPT-2 checkpoint?)", st.describe(), name);
  };
  const int64_t vp = c.padded_vocab_size(1);
  std::vector<ShardTensor> tensors;
  for (const auto& spec : model::GptModel::all_param_specs(c, vp)) {
    bool tr = false;
    const std::string name = lookup(hf_name(spec.name, &tr));
    Tensor t = st.read_f32(name);
    if (tr) t = transpose2d(t);
    if (spec.name == "embedding.word_embeddings.weight") {
      Tensor init = model::init_full(spec, 0, c.init_method_std, c.num_layers);
      t = fit_rows(t, spec.global_shape, &init, spec.name);
    }
    TRIPOD_CHECK(t.shape() == spec.global_shape, "{}: tensor {} has shape {}, expected {} from config.json", in_dir,
                 name, shape_str(t.shape()), shape_str(spec.global_shape));
    tensors.push_back({"model." + spec.name, spec.global_shape, spec.shard, t});
  }
  json meta = extra;
  meta["model"] = config_to_json(c);
  meta["consumed_samples"] = 0;
  meta["optimizer"] = {{"saved", false}, {"steps", 0}};
  meta["source"] = "imported from Hugging Face GPT-2 " + in_dir;
  save_unsharded(save_dir, 0, tensors, meta);
  return c;
}

}  // namespace tripod::interop
