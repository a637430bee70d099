// The steps the Hugging Face export/import tests share (test_hf_gpt2.cpp,
// test_hf_llama.cpp), through the real `tripod` executable:
//   export_and_compare: train a small model 3 iterations, `convert
//     --export-hf`, and compare tripod's logits of one T-token sequence with
//     a float64 PyTorch forward of the exported files (a script in this
//     folder), within 1e-5;
//   import_round_trip: `convert --import-hf` then `--export-hf` again gives
//     byte-identical files, and every imported weight equals the original;
//   finetune_from_import: `train --load IMPORTED --finetune` starts at
//     iteration 1; without --finetune the missing optimizer state is named.
// Each uses gtest assertions; callers check HasFatalFailure() after them.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "ckpt/reshard.h"
#include "ckpt/sharded_checkpoint.h"
#include "common.h"
#include "model/gpt_model.h"

namespace ckpt_test {

struct HfExportRun {
  std::string bin, log;
  tripod::Tensor tokens;  // (1, T) int32
  int64_t T = 20, V = 0;
  std::string ref;        // PyTorch's logits, (T, V) float64
  bool no_torch = false;  // python3-torch missing: the caller skips
};

inline HfExportRun export_and_compare(const Scratch& s, const std::string& model_flags, const std::string& script,
                                      int64_t V) {
  using namespace tripod;
  HfExportRun r;
  r.V = V;
  r.bin = env("TRIPOD_BIN"), r.log = (s / "log").string();
  const std::string& bin = r.bin;
  const std::string& log = r.log;
  EXPECT_EQ(sh(bin + " train " + model_flags + " --train-iters 3 --save " + (s / "ck").string() + " > " + log +
               " 2>&1"), 0) << slurp(log);
  EXPECT_EQ(sh(bin + " convert --load " + (s / "ck").string() + " --export-hf " + (s / "hf").string() + " > " + log +
               " 2>&1"), 0) << slurp(log);
  if (::testing::Test::HasFailure()) return r;

  // tripod's logits for one sequence of T tokens.
  const auto reader = ckpt::CheckpointReader::open((s / "ck").string());
  auto be = backend::make_cpu_backend();
  model::GptModel m(reader.config(), model::StageConfig{}, *be);
  ckpt::load_params(reader, m.params(), 0, 0.02f, 2);
  const int64_t T = r.T, Vp = m.padded_vocab();
  r.tokens = Tensor::empty({1, T}, DType::I32);
  Tensor zeros = Tensor::zeros({1, T}, DType::I32);
  std::string tokens_txt;
  for (int64_t t = 0; t < T; ++t) {
    r.tokens.data<int32_t>()[t] = static_cast<int32_t>((t * 37 + 11) % V);
    tokens_txt += std::to_string(r.tokens.data<int32_t>()[t]) + " ";
  }
  std::ofstream(s / "tokens.txt") << tokens_txt;
  auto acts = m.make_acts(1, T);
  be->copy(acts.tokens, r.tokens);
  be->copy(acts.targets, zeros);
  m.forward(acts, false, 0.f, 0);
  Tensor logits = Tensor::empty({T, Vp}, DType::F32);
  be->copy(logits, m.last_logits());
  be->synchronize();

  if (sh("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") != 0) {
    r.no_torch = true;
    return r;
  }
  const std::string py = "/usr/bin/python3 " + env("TRIPOD_SOURCE_DIR") + "/tests/ckpt/" + script + " " +
                         (s / "hf").string() + " " + (s / "tokens.txt").string() + " " + (s / "ref.bin").string();
  EXPECT_EQ(sh(py + " > " + log + " 2>&1"), 0) << slurp(log);
  r.ref = slurp(s / "ref.bin");
  EXPECT_EQ(r.ref.size(), static_cast<size_t>(T * V) * 8);
  if (::testing::Test::HasFailure()) return r;
  double max_diff = 0, max_ref = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t v = 0; v < V; ++v) {
      double x;
      std::memcpy(&x, r.ref.data() + (t * V + v) * 8, 8);
      max_diff = std::max(max_diff, std::fabs(x - logits.data<float>()[t * Vp + v]));
      max_ref = std::max(max_ref, std::fabs(x));
    }
  EXPECT_LT(max_diff, 1e-5) << "max |logit| " << max_ref;
  EXPECT_GT(max_ref, 0.1) << "degenerate logits";
  std::printf("max |tripod - pytorch| logit difference %.3g (max |logit| %.3g)\n", max_diff, max_ref);
  return r;
}

// hidden: the model width, for the vocabulary rows that hold real tokens.
inline void import_round_trip(const Scratch& s, const HfExportRun& r, int64_t hidden) {
  using namespace tripod;
  const std::string &bin = r.bin, &log = r.log;
  ASSERT_EQ(sh(bin + " convert --import-hf " + (s / "hf").string() + " --save " + (s / "ck2").string() + " > " + log +
               " 2>&1"), 0) << slurp(log);
  ASSERT_EQ(sh(bin + " convert --load " + (s / "ck2").string() + " --export-hf " + (s / "hf2").string() + " > " +
               log + " 2>&1"), 0) << slurp(log);
  EXPECT_EQ(slurp(s / "hf" / "model.safetensors"), slurp(s / "hf2" / "model.safetensors"));
  EXPECT_EQ(slurp(s / "hf" / "config.json"), slurp(s / "hf2" / "config.json"));
  const auto reader = ckpt::CheckpointReader::open((s / "ck").string());
  const auto imported = ckpt::CheckpointReader::open((s / "ck2").string());
  EXPECT_EQ(imported.iteration(), 0);
  for (const auto& name : reader.tensor_names()) {
    if (name.rfind("model.", 0) != 0) continue;
    Tensor a = reader.read_full(name), b = imported.read_full(name);
    ASSERT_EQ(a.shape(), b.shape()) << name;
    // The padded vocabulary rows beyond V are not exported.
    const bool vocab_rows =
        name.find("word_embeddings") != std::string::npos || name.find("output_layer") != std::string::npos;
    const size_t bytes = vocab_rows ? size_t(r.V * hidden * 4) : a.nbytes();
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), bytes), 0) << name;
  }
}

inline void finetune_from_import(const Scratch& s, const HfExportRun& r, const std::string& model_flags) {
  const std::string &bin = r.bin, &log = r.log;
  ASSERT_EQ(sh(bin + " train " + model_flags + " --train-iters 2 --finetune --load " + (s / "ck2").string() +
               " --metrics-file " + (s / "ft.jsonl").string() + " > " + log + " 2>&1"), 0) << slurp(log);
  const auto ft = losses(s / "ft.jsonl");
  ASSERT_EQ(ft.size(), 2u);
  EXPECT_EQ(ft[0].first, 1);
  EXPECT_NE(sh(bin + " train " + model_flags + " --train-iters 2 --load " + (s / "ck2").string() + " > " + log +
               " 2>&1"), 0);
  EXPECT_NE(slurp(log).find("--finetune or --no-load-optim"), std::string::npos) << slurp(log);
}

}  // namespace ckpt_test
