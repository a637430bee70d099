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
//  - `tripod train --load IMPORTED --finetune` starts at iteration 0 and trains.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "backend/cpu/cpu_backend.h"
#include "ckpt/reshard.h"
#include "ckpt/sharded_checkpoint.h"
#include "common.h"
#include "model/gpt_model.h"

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
  Scratch s("hf");
  const std::string bin = env("TRIPOD_BIN"), log = (s / "log").string();
  ASSERT_EQ(sh(bin + " train " + kModel + " --train-iters 3 --save " + (s / "ck").string() + " > " + log + " 2>&1"), 0)
      << slurp(log);
  ASSERT_EQ(sh(bin + " convert --load " + (s / "ck").string() + " --export-hf " + (s / "hf").string() + " > " + log +
               " 2>&1"), 0) << slurp(log);

  // tripod's logits for one sequence of T tokens.
  const auto reader = ckpt::CheckpointReader::open((s / "ck").string());
  auto be = backend::make_cpu_backend();
  model::GptModel m(reader.config(), model::StageConfig{}, *be);
  ckpt::load_params(reader, m.params(), 0, 0.02f, 2);
  const int64_t T = 20, V = 500, Vp = m.padded_vocab();
  Tensor tok = Tensor::empty({1, T}, DType::I32), zeros = Tensor::zeros({1, T}, DType::I32);
  std::string tokens_txt;
  for (int64_t t = 0; t < T; ++t) {
    tok.data<int32_t>()[t] = static_cast<int32_t>((t * 37 + 11) % V);
    tokens_txt += std::to_string(tok.data<int32_t>()[t]) + " ";
  }
  {
    std::ofstream(s / "tokens.txt") << tokens_txt;
  }
  auto acts = m.make_acts(1, T);
  be->copy(acts.tokens, tok);
  be->copy(acts.targets, zeros);
  m.forward(acts, false, 0.f, 0);
  Tensor logits = Tensor::empty({T, Vp}, DType::F32);
  be->copy(logits, m.last_logits());
  be->synchronize();

  const std::string py = "/usr/bin/python3 " + env("TRIPOD_SOURCE_DIR") + "/tests/ckpt/hf_llama_forward.py " +
                         (s / "hf").string() + " " + (s / "tokens.txt").string() + " " + (s / "ref.bin").string();
  if (sh("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") != 0) GTEST_SKIP() << "python3-torch not installed";
  ASSERT_EQ(sh(py + " > " + log + " 2>&1"), 0) << slurp(log);
  const std::string ref = slurp(s / "ref.bin");
  ASSERT_EQ(ref.size(), static_cast<size_t>(T * V) * 8);
  double max_diff = 0, max_ref = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t v = 0; v < V; ++v) {
      double r;
      std::memcpy(&r, ref.data() + (t * V + v) * 8, 8);
      max_diff = std::max(max_diff, std::fabs(r - logits.data<float>()[t * Vp + v]));
      max_ref = std::max(max_ref, std::fabs(r));
    }
  EXPECT_LT(max_diff, 1e-5) << "max |logit| " << max_ref;
  EXPECT_GT(max_ref, 0.1) << "degenerate logits";
  std::printf("max |tripod - pytorch| logit difference %.3g (max |logit| %.3g)\n", max_diff, max_ref);

  // Import, then export again: identical files; identical weights.
  ASSERT_EQ(sh(bin + " convert --import-hf " + (s / "hf").string() + " --save " + (s / "ck2").string() + " > " + log +
               " 2>&1"), 0) << slurp(log);
  ASSERT_EQ(sh(bin + " convert --load " + (s / "ck2").string() + " --export-hf " + (s / "hf2").string() + " > " +
               log + " 2>&1"), 0) << slurp(log);
  EXPECT_EQ(slurp(s / "hf" / "model.safetensors"), slurp(s / "hf2" / "model.safetensors"));
  EXPECT_EQ(slurp(s / "hf" / "config.json"), slurp(s / "hf2" / "config.json"));
  const auto imported = ckpt::CheckpointReader::open((s / "ck2").string());
  EXPECT_EQ(imported.iteration(), 0);
  for (const auto& name : reader.tensor_names()) {
    if (name.rfind("model.", 0) != 0) continue;
    Tensor a = reader.read_full(name), b = imported.read_full(name);
    ASSERT_EQ(a.shape(), b.shape()) << name;
    const bool vocab_rows =
        name.find("word_embeddings") != std::string::npos || name.find("output_layer") != std::string::npos;
    const size_t bytes = vocab_rows ? V * 64 * 4 : a.nbytes();
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), bytes), 0) << name;
  }

  // `tripod generate --prompt-ids` on the import: the prompt's logits
  // (--logits-out) are PyTorch's, and the greedy continuation starts with
  // the argmax of PyTorch's last row.
  std::string ids_csv;
  for (int64_t t = 0; t < T; ++t) ids_csv += (t ? "," : "") + std::to_string(tok.data<int32_t>()[t]);
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
    double r;
    std::memcpy(&g, gl.data() + i * 4, 4);
    std::memcpy(&r, ref.data() + i * 8, 8);
    gen_diff = std::max(gen_diff, std::fabs(r - g));
    if (i >= (T - 1) * V && r > best) best = r, argmax = i - (T - 1) * V;
  }
  EXPECT_LT(gen_diff, 1e-5);
  std::istringstream gen_ids(slurp(gen_out));
  std::vector<int64_t> gen;
  for (int64_t x; gen_ids >> x;) gen.push_back(x);
  ASSERT_EQ(gen.size(), 4u) << slurp(gen_out);
  EXPECT_EQ(gen[0], argmax);

  // Fine-tuning starts from the import.
  ASSERT_EQ(sh(bin + " train " + kModel + " --train-iters 2 --finetune --load " + (s / "ck2").string() +
               " --metrics-file " + (s / "ft.jsonl").string() + " > " + log + " 2>&1"), 0) << slurp(log);
  const auto ft = losses(s / "ft.jsonl");
  ASSERT_EQ(ft.size(), 2u);
  EXPECT_EQ(ft[0].first, 1);
  // Without --finetune the missing optimizer state is a clear error.
  EXPECT_NE(sh(bin + " train " + kModel + " --train-iters 2 --load " + (s / "ck2").string() + " > " + log + " 2>&1"),
            0);
  EXPECT_NE(slurp(log).find("--finetune or --no-load-optim"), std::string::npos) << slurp(log);
  if (!HasFailure()) fs::remove_all(s.dir);
}

}  // namespace
