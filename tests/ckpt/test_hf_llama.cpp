// Hugging Face LlamaForCausalLM export/import (`tripod convert`) of a
// Llama-family model (grouped-query attention, RoPE, RMSNorm, SwiGLU,
// untied output layer, no biases):
//  - export a briefly trained checkpoint; a plain Llama forward in PyTorch
//    (hf_llama_forward.py, float64, HF names, rotate_half RoPE, HF's K/V
//    head sharing) gives logits within 1e-5 of tripod's (GptModel::forward
//    + last_logits): the q/k/v split of the grouped qkv, the gate/up split
//    and the rotary convention are right;
//  - import the export, export again: model.safetensors and config.json are
//    byte-identical, and every imported weight equals the original bit for bit;
//  - `tripod train --load IMPORTED --finetune` starts at iteration 0 and trains;
//  - the same model with --qk-layernorm as Qwen3ForCausalLM (below), whose
//    import fine-tunes with the flag and is refused without it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include <nlohmann/json.hpp>

#include "hf_export_check.h"

namespace {

using namespace ckpt_test;
using namespace tripod;

const std::string kModel =
    "--num-layers 2 --hidden-size 64 --num-attention-heads 8 --seq-length 32 --mock-data --vocab-size 500 "
    "--micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --seed 5 --log-interval 1 --eval-interval 0 "
    "--group-query-attention --num-query-groups 2 --position-embedding-type rope --rotary-base 500000 "
    "--normalization RMSNorm --norm-epsilon 1e-6 --swiglu --ffn-hidden-size 96 "
    "--untie-embeddings-and-output-weights --disable-bias-linear";

TEST(HfLlama, ExportMatchesPyTorchAndImportRoundTrips) {
  Scratch s("hf_llama");
  const HfExportRun r = export_and_compare(s, kModel, "hf_llama_forward.py", 500);
  if (HasFailure()) return;
  if (r.no_torch) GTEST_SKIP() << "python3-torch not installed";
  import_round_trip(s, r, 64);
  if (HasFatalFailure()) return;
  const std::string &bin = r.bin, &log = r.log;
  const int64_t T = r.T, V = r.V;

  // `tripod generate --prompt-ids` on the import: the prompt's logits
  // (--logits-out) are PyTorch's, and the greedy continuation starts with
  // the argmax of PyTorch's last row.
  std::string ids_csv;
  for (int64_t t = 0; t < T; ++t) ids_csv += (t ? "," : "") + std::to_string(r.tokens.data<int32_t>()[t]);
  const std::string gen_out = (s / "gen.txt").string();
  ASSERT_EQ(sh(bin + " generate --load " + (s / "ck2").string() + " --prompt-ids " + ids_csv +
               " --greedy --max-new-tokens 4 --logits-out " + (s / "gen_logits.f32").string() + " > " + gen_out +
               " 2> " + log), 0) << slurp(log);
  const std::string gl = slurp(s / "gen_logits.f32");
  ASSERT_EQ(gl.size(), static_cast<size_t>(T * V) * 4);
  double gen_diff = 0, best = -1e300;
  int64_t argmax = 0;
  for (int64_t i = 0; i < T * V; ++i) {
    float g;
    double x;
    std::memcpy(&g, gl.data() + i * 4, 4);
    std::memcpy(&x, r.ref.data() + i * 8, 8);
    gen_diff = std::max(gen_diff, std::fabs(x - g));
    if (i >= (T - 1) * V && x > best) best = x, argmax = i - (T - 1) * V;
  }
  EXPECT_LT(gen_diff, 1e-5);
  std::istringstream gen_ids(slurp(gen_out));
  std::vector<int64_t> gen;
  for (int64_t x; gen_ids >> x;) gen.push_back(x);
  ASSERT_EQ(gen.size(), 4u) << slurp(gen_out);
  EXPECT_EQ(gen[0], argmax);

  finetune_from_import(s, r, kModel);
  if (!HasFailure()) fs::remove_all(s.dir);
}

// Qwen3ForCausalLM: the Llama model with --qk-layernorm. The PyTorch
// forward applies HF's q_norm / k_norm (an RMSNorm over each head, before
// RoPE) and must agree within 1e-5; import + export are byte-identical;
// config.json holds what transformers' Qwen3Config defaults would get
// wrong; a head_dim other than hidden / heads is refused by name.
TEST(HfLlama, Qwen3ExportMatchesPyTorchAndImportRoundTrips) {
  Scratch s("hf_qwen3");
  const std::string flags = kModel + " --qk-layernorm";
  const HfExportRun r = export_and_compare(s, flags, "hf_llama_forward.py", 500);
  if (HasFailure()) return;
  if (r.no_torch) std::printf("python3-torch not installed: the PyTorch forward was not compared\n");
  import_round_trip(s, r, 64);
  if (HasFatalFailure()) return;
  const auto cfg = nlohmann::json::parse(slurp(s / "hf" / "config.json"));
  EXPECT_EQ(cfg["architectures"], nlohmann::json::array({"Qwen3ForCausalLM"}));
  EXPECT_EQ(cfg["model_type"], "qwen3");
  EXPECT_EQ(cfg["head_dim"], 8);  // 64 / 8 heads (Qwen3Config's default is 128)
  EXPECT_EQ(cfg["num_key_value_heads"], 2);
  EXPECT_EQ(cfg["attention_bias"], false);
  EXPECT_EQ(cfg["tie_word_embeddings"], false);
  EXPECT_EQ(cfg["use_sliding_window"], false);
  EXPECT_EQ(cfg["rope_theta"], 500000.0);
  EXPECT_FALSE(cfg.contains("mlp_bias"));
  const auto st = ckpt::SafetensorsFile::open((s / "hf" / "model.safetensors").string());
  for (const char* n : {"model.layers.1.self_attn.q_norm.weight", "model.layers.1.self_attn.k_norm.weight"}) {
    ASSERT_TRUE(st.contains(n)) << n;
    EXPECT_EQ(st.find(n)->shape, (Shape{8})) << n;
  }
  EXPECT_TRUE(ckpt::CheckpointReader::open((s / "ck2").string()).config().qk_layernorm);
  // The import fine-tunes with the flag; without it the load names the flag.
  finetune_from_import(s, r, flags);
  EXPECT_NE(sh(r.bin + " train " + kModel + " --train-iters 2 --finetune --load " + (s / "ck2").string() + " > " +
               r.log + " 2>&1"), 0);
  EXPECT_NE(slurp(r.log).find("no --qk-layernorm: the checkpoint has query/key norms"), std::string::npos)
      << slurp(r.log);
  // head_dim 16 with hidden 64 and 8 heads: refused, naming the field.
  auto bad = cfg;
  bad["head_dim"] = 16;
  fs::create_directories(s / "bad");
  fs::copy(s / "hf" / "model.safetensors", s / "bad" / "model.safetensors");
  std::ofstream(s / "bad" / "config.json") << bad.dump(2);
  EXPECT_NE(sh(r.bin + " convert --import-hf " + (s / "bad").string() + " --save " + (s / "bad_ck").string() + " > " +
               r.log + " 2>&1"), 0);
  EXPECT_NE(slurp(r.log).find("head_dim 16 differs from hidden_size / num_attention_heads"), std::string::npos)
      << slurp(r.log);
  if (!HasFailure()) fs::remove_all(s.dir);
}

}  // namespace
