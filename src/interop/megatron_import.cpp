// Implementation of interop/megatron_import.h.
#include "interop/megatron_import.h"

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <regex>

#include "base/error.h"
#include "base/log.h"
#include "ckpt/atomic_io.h"
#include "ckpt/megatron_layout.h"
#include "ckpt/reshard.h"
#include "ckpt/sharded_checkpoint.h"
#include "interop/torch_pickle.h"
#include "model/gpt_model.h"

namespace tripod::interop {
namespace fs = std::filesystem;
using ckpt::MegatronRankDirs;
using ckpt::ShardTensor;
using ckpt::config_to_json;
using ckpt::fit_rows;
using ckpt::is_megatron_torch_dist;
using ckpt::megatron_checkpoint_hint;
using ckpt::megatron_iteration_dir;
using ckpt::megatron_rank_dirs;
using ckpt::save_unsharded;
using json = nlohmann::json;
using K = PyValue::Kind;

namespace {

// ---- args ----

const PyValue* arg(const PyValue& args, const char* name) {
  const PyValue* v = args.get(name);
  return v && v->kind != K::kNone ? v : nullptr;
}

std::optional<int64_t> arg_int(const PyValue& args, const char* name) {
  const PyValue* v = arg(args, name);
  if (v && v->kind == K::kInt) return v->i;
  return std::nullopt;
}

int64_t need_int(const PyValue& args, const char* name, const std::string& file) {
  const auto v = arg_int(args, name);
  TRIPOD_CHECK(v.has_value(), "{}: args.{} is missing or not an integer", file, name);
  return *v;
}

bool arg_true(const PyValue& args, const char* name) {
  const PyValue* v = arg(args, name);
  return v && ((v->kind == K::kBool && v->b) || (v->kind == K::kInt && v->i != 0));
}

std::string arg_str(const PyValue& args, const char* name, const std::string& fallback) {
  const PyValue* v = arg(args, name);
  return v && v->kind == K::kStr ? v->s : fallback;
}

double arg_float(const PyValue& args, const char* name, double fallback) {
  const PyValue* v = arg(args, name);
  if (v && v->kind == K::kFloat) return v->f;
  if (v && v->kind == K::kInt) return static_cast<double>(v->i);
  return fallback;
}

// ---- names ----

// tripod's name of Megatron-core parameter `key` of a stage whose first
// layer is `offset`; "" for entries without a tripod parameter.
std::string tripod_name(const std::string& key, int64_t offset, const std::string& file) {
  if (key.size() >= 12 && key.compare(key.size() - 12, 12, "_extra_state") == 0) return "";
  if (key.rfind("output_layer.", 0) == 0) return "";  // tied to the word embeddings (checked in args)
  if (key.rfind("embedding.", 0) == 0 || key.rfind("decoder.final_layernorm.", 0) == 0) return key;
  static const std::regex layer(R"(decoder\.layers\.(\d+)\.(.+))");
  std::smatch m;
  TRIPOD_CHECK_HINT(std::regex_match(key, m, layer),
                    "tripod imports Megatron-core GPT models (not the legacy --use-legacy-models ones)",
                    "{}: parameter {} has no tripod counterpart", file, key);
  std::string rest = m[2];
  static const std::map<std::string, std::string> te = {
      {"self_attention.linear_qkv.layer_norm_weight", "input_layernorm.weight"},
      {"self_attention.linear_qkv.layer_norm_bias", "input_layernorm.bias"},
      {"mlp.linear_fc1.layer_norm_weight", "pre_mlp_layernorm.weight"},
      {"mlp.linear_fc1.layer_norm_bias", "pre_mlp_layernorm.bias"}};
  if (auto it = te.find(rest); it != te.end()) rest = it->second;
  return fmt::format("decoder.layers.{}.{}", offset + std::stoll(m[1]), rest);
}

// Megatron's per-head [q_h, k_h, v_h] rows (all TP slices in rank order) ->
// tripod's [Q | K | V]. t is (3C, cols) or (3C,).
Tensor qkv_to_tripod(const Tensor& t, int64_t heads, int64_t hn) {
  const int64_t cols = t.dim() == 2 ? t.size(1) : 1, C = heads * hn;
  Tensor out = Tensor::empty(t.shape(), DType::F32);
  const float* s = t.data<float>();
  float* d = out.data<float>();
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t p = 0; p < 3; ++p)
      for (int64_t j = 0; j < hn; ++j)
        std::copy_n(s + ((h * 3 + p) * hn + j) * cols, cols, d + (p * C + h * hn + j) * cols);
  return out;
}

Tensor concat(const std::vector<Tensor>& parts, int dim) {
  Shape shape = parts[0].shape();
  for (size_t i = 1; i < parts.size(); ++i) shape[static_cast<size_t>(dim)] += parts[i].size(dim);
  Tensor out = Tensor::empty(shape, DType::F32);
  float* d = out.data<float>();
  if (dim == 0) {
    for (const auto& p : parts) d = std::copy_n(p.data<float>(), p.numel(), d);
  } else {
    const int64_t rows = shape[0], width = shape[1];
    int64_t col = 0;
    for (const auto& p : parts) {
      for (int64_t r = 0; r < rows; ++r) std::copy_n(p.data<float>() + r * p.size(1), p.size(1), d + r * width + col);
      col += p.size(1);
    }
  }
  return out;
}

}  // namespace

MegatronImport import_megatron(const std::string& dir, const std::string& save_dir, const json& extra) {
  std::error_code ec;
  TRIPOD_CHECK_HINT(fs::is_directory(dir, ec), "pass Megatron's --save directory (or one iter_N inside it)",
                    "--import-megatron {}: no such directory", dir);
  const fs::path iter = megatron_iteration_dir(dir);
  TRIPOD_CHECK_HINT(!iter.empty() && fs::is_directory(iter, ec),
                    "pass Megatron's --save directory (with latest_checkpointed_iteration.txt) or an iter_N inside it",
                    "--import-megatron {}: not a Megatron checkpoint directory", dir);
  TRIPOD_CHECK_HINT(!is_megatron_torch_dist(iter) || !megatron_rank_dirs(iter).files.empty(),
                    megatron_checkpoint_hint(dir),
                    "--import-megatron {}: the torch_dist format is not read by tripod", dir);
  const MegatronRankDirs ranks = megatron_rank_dirs(iter);
  TRIPOD_CHECK(!ranks.files.empty(), "--import-megatron {}: no mp_rank_* directories in {}", dir, iter.string());
  TRIPOD_CHECK(!ranks.expert, "--import-megatron {}: expert-parallel (MoE) checkpoints are not supported", dir);
  for (int t = 0; t < ranks.tp; ++t)
    for (int p = 0; p < ranks.pp; ++p)
      TRIPOD_CHECK(ranks.files.count({t, p}) && fs::is_regular_file(ranks.files.at({t, p}), ec),
                   "--import-megatron {}: {} is missing (TP {} x PP {} expected every rank file)", dir,
                   (iter /
                    (ranks.pp > 1 ? fmt::format("mp_rank_{:02d}_{:03d}", t, p) : fmt::format("mp_rank_{:02d}", t)) /
                    "model_optim_rng.pt")
                       .string(),
                   ranks.tp, ranks.pp);

  // The model arguments, from the first rank's args.
  std::map<std::pair<int, int>, std::unique_ptr<TorchFile>> files;
  for (const auto& [tp_pp, path] : ranks.files) files[tp_pp] = std::make_unique<TorchFile>(path.string());
  const TorchFile& first = *files.at({0, 0});
  const PyValue* args = first.root().get("args");
  TRIPOD_CHECK(args && args->kind == K::kObject, "{}: no args (argparse.Namespace) in the checkpoint", first.path());
  const std::string& f0 = first.path();
  MegatronImport out;
  config::GptConfig& c = out.config;
  c.num_layers = need_int(*args, "num_layers", f0);
  c.hidden_size = need_int(*args, "hidden_size", f0);
  c.num_attention_heads = need_int(*args, "num_attention_heads", f0);
  c.ffn_hidden_size = arg_int(*args, "ffn_hidden_size").value_or(4 * c.hidden_size);
  c.seq_length = need_int(*args, "seq_length", f0);
  c.max_position_embeddings = arg_int(*args, "max_position_embeddings").value_or(c.seq_length);
  const int64_t padded = need_int(*args, "padded_vocab_size", f0);
  c.vocab_size = arg_int(*args, "vocab_size").value_or(padded);
  c.make_vocab_size_divisible_by = arg_int(*args, "make_vocab_size_divisible_by").value_or(128);
  c.layernorm_epsilon =
      static_cast<float>(arg_float(*args, "norm_epsilon", arg_float(*args, "layernorm_epsilon", 1e-5)));
  c.init_method_std = static_cast<float>(arg_float(*args, "init_method_std", 0.02));
  out.tp = static_cast<int>(arg_int(*args, "tensor_model_parallel_size").value_or(1));
  out.pp = static_cast<int>(arg_int(*args, "pipeline_model_parallel_size").value_or(1));
  out.vpp = static_cast<int>(arg_int(*args, "virtual_pipeline_model_parallel_size").value_or(1));
  TRIPOD_CHECK(out.tp == ranks.tp && out.pp == ranks.pp,
               "{}: args say TP {} x PP {} but {} holds the files of TP {} x PP {}", f0, out.tp, out.pp, iter.string(),
               ranks.tp, ranks.pp);
  // What tripod's GPT does not have.
  auto refuse = [&](bool bad, const std::string& what) {
    TRIPOD_CHECK_HINT(!bad, "tripod imports GPT-2-style models: LayerNorm, learned positions, GELU, biases, tied "
                      "embeddings, multi-head attention", "{}: {} is not supported by the import", f0, what);
  };
  refuse(arg_true(*args, "swiglu"), "--swiglu");
  const std::string norm = arg_str(*args, "normalization", "LayerNorm");
  refuse(norm != "LayerNorm", "--normalization " + norm);
  refuse(arg_str(*args, "position_embedding_type", "learned_absolute") != "learned_absolute",
         "--position-embedding-type " + arg_str(*args, "position_embedding_type", ""));
  refuse(arg_true(*args, "untie_embeddings_and_output_weights"), "--untie-embeddings-and-output-weights");
  refuse(arg(*args, "add_bias_linear") && !arg_true(*args, "add_bias_linear"), "--disable-bias-linear");
  refuse(arg_true(*args, "group_query_attention") &&
             arg_int(*args, "num_query_groups").value_or(c.num_attention_heads) != c.num_attention_heads,
         "--group-query-attention");
  refuse(arg_int(*args, "kv_channels").value_or(c.hidden_size / c.num_attention_heads) !=
             c.hidden_size / c.num_attention_heads,
         "--kv-channels other than hidden / heads");
  refuse(arg_true(*args, "apply_residual_connection_post_layernorm"), "--apply-residual-connection-post-layernorm");
  refuse(arg_true(*args, "num_experts"), "--num-experts");
  refuse(arg_true(*args, "qk_layernorm"), "--qk-layernorm");
  refuse(arg_true(*args, "decoder_first_pipeline_num_layers") || arg_true(*args, "decoder_last_pipeline_num_layers") ||
             arg_true(*args, "account_for_embedding_in_pipeline_split") ||
             arg_true(*args, "account_for_loss_in_pipeline_split"),
         "an uneven pipeline split (--decoder-first/last-pipeline-num-layers, --account-for-*-in-pipeline-split)");
  if (arg(*args, "bias_gelu_fusion") && !arg_true(*args, "bias_gelu_fusion") && !arg_true(*args, "openai_gelu"))
    log::warn("{}: trained with --no-bias-gelu-fusion (erf GELU); tripod's GELU is the tanh approximation "
              "Megatron's fused bias-GELU uses, so outputs differ slightly", f0);
  // --apply-layernorm-1p: Megatron stores each LayerNorm weight as gamma - 1
  // (zero-centered) and computes with 1 + it; tripod stores gamma.
  const bool layernorm_1p = arg_true(*args, "apply_layernorm_1p");
  if (layernorm_1p)
    log::info("{}: trained with --apply-layernorm-1p: the LayerNorm weights are stored zero-centered; the import "
              "adds the 1", f0);
  c.finalize();
  const PyValue* it = first.root().get("iteration");
  out.iteration = it && it->kind == K::kInt ? it->i : 0;
  out.consumed_samples = arg_int(*args, "consumed_train_samples").value_or(0);

  // Every tensor of every rank, by tripod name: per TP rank.
  const int64_t L = c.num_layers;
  TRIPOD_CHECK(L % (int64_t(out.pp) * out.vpp) == 0, "{}: {} layers do not split over PP {} x vpp {}", f0, L, out.pp,
               out.vpp);
  std::map<std::string, std::vector<Tensor>> slices;
  for (const auto& [tp_pp, file] : files) {
    const auto [t, p] = tp_pp;
    for (int v = 0; v < out.vpp; ++v) {
      const std::string key = out.vpp > 1 ? fmt::format("model{}", v) : "model";
      const PyValue* model = file->root().get(key);
      TRIPOD_CHECK(model && model->kind == K::kDict, "{}: no '{}' state dict", file->path(), key);
      TRIPOD_CHECK_HINT(!model->get("language_model"), "re-train or convert the model as a Megatron-core GPT",
                        "{}: a legacy (--use-legacy-models) Megatron model; tripod imports Megatron-core GPT models",
                        file->path());
      const int64_t offset = v * (L / out.vpp) + p * (L / (int64_t(out.pp) * out.vpp));
      for (const auto& [k, val] : model->dict) {
        if (k->kind != K::kStr || val->kind != K::kTensor) continue;
        const std::string name = tripod_name(k->s, offset, file->path());
        if (name.empty()) continue;
        auto& v_slices = slices[name];
        if (v_slices.size() < static_cast<size_t>(out.tp)) v_slices.resize(static_cast<size_t>(out.tp));
        if (!v_slices[static_cast<size_t>(t)].defined()) v_slices[static_cast<size_t>(t)] = file->tensor_f32(*val);
      }
    }
  }

  const int64_t vp = c.padded_vocab_size(1);
  std::vector<ShardTensor> tensors;
  for (const auto& spec : model::GptModel::all_param_specs(c, vp)) {
    auto itr = slices.find(spec.name);
    TRIPOD_CHECK(itr != slices.end(), "--import-megatron {}: no rank holds {}", dir, spec.name);
    auto& parts = itr->second;
    for (int t = 0; t < out.tp; ++t)
      TRIPOD_CHECK(parts[static_cast<size_t>(t)].defined(), "--import-megatron {}: TP rank {} lacks {}", dir, t,
                   spec.name);
    Tensor full;
    switch (spec.shard) {
      case model::ShardDim::None: full = parts[0]; break;
      case model::ShardDim::Rows: full = concat(parts, 0); break;
      case model::ShardDim::Cols: full = parts[0].dim() == 2 ? concat(parts, 1) : parts[0]; break;
      case model::ShardDim::QkvRows:
        full = qkv_to_tripod(concat(parts, 0), c.num_attention_heads, c.head_size());
        break;
      case model::ShardDim::GluRows:    // SwiGLU and grouped-query attention: refused with the
      case model::ShardDim::QkvGroups:  // checkpoint's args above; a guard
        TRIPOD_FAIL("--import-megatron {}: {} is a Llama-family tensor; the legacy import reads GPT models only",
                    dir, spec.name);
    }
    if (spec.name == "embedding.word_embeddings.weight") {
      Tensor init = model::init_full(spec, 0, c.init_method_std, c.num_layers);
      full = fit_rows(full, spec.global_shape, &init, spec.name);
    }
    if (layernorm_1p && model::is_layernorm(spec) && spec.name.ends_with(".weight"))
      for (int64_t i = 0; i < full.numel(); ++i) full.data<float>()[i] += 1.0f;
    TRIPOD_CHECK(full.shape() == spec.global_shape, "--import-megatron {}: {} merges to {}, expected {}", dir,
                 spec.name, shape_str(full.shape()), shape_str(spec.global_shape));
    tensors.push_back({"model." + spec.name, spec.global_shape, spec.shard, full});
  }

  json meta = extra;
  meta["model"] = config_to_json(c);
  meta["consumed_samples"] = out.consumed_samples;
  meta["optimizer"] = {{"saved", false}, {"steps", 0}};
  meta["source"] = fmt::format("imported from Megatron-LM {} (TP {} x PP {})", iter.string(), out.tp, out.pp);
  save_unsharded(save_dir, out.iteration, tensors, meta);
  return out;
}

}  // namespace tripod::interop
