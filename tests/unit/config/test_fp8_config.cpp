// config/fp8_config.h: which layers run FP8 GEMMs (the one rule behind
// --first-last-layers-bf16, read through GptConfig::layer_spec), the checks
// of the FP8 options and Megatron's spellings.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "config/gpt_config.h"

namespace tripod::config {
namespace {

GptConfig model(int64_t layers) {
  GptConfig c;
  c.num_layers = layers, c.hidden_size = 64, c.num_attention_heads = 4, c.seq_length = 32, c.vocab_size = 500;
  return c;
}

std::vector<bool> fp8_layers(const GptConfig& c) {
  std::vector<bool> v;
  for (int64_t i = 0; i < c.num_layers; ++i) v.push_back(c.layer_spec(i).fp8);
  return v;
}

TEST(Fp8Config, LayerSpecSaysWhichLayersQuantize) {
  GptConfig c = model(6);
  c.finalize();
  EXPECT_EQ(fp8_layers(c), std::vector<bool>(6, false));  // no --fp8-format
  c.fp8.format = Fp8Format::Hybrid;
  c.finalize();
  EXPECT_EQ(fp8_layers(c), std::vector<bool>(6, true));
  c.fp8.first_last_layers_bf16 = true;  // Megatron's defaults: 1 and 1
  c.finalize();
  EXPECT_EQ(fp8_layers(c), (std::vector<bool>{false, true, true, true, true, false}));
  c.fp8.num_layers_at_start_in_bf16 = 0;
  c.fp8.num_layers_at_end_in_bf16 = 2;
  c.finalize();
  EXPECT_EQ(fp8_layers(c), (std::vector<bool>{true, true, true, true, false, false}));
  c.fp8.num_layers_at_start_in_bf16 = 3;
  c.fp8.num_layers_at_end_in_bf16 = 3;
  c.finalize();
  EXPECT_EQ(fp8_layers(c), std::vector<bool>(6, false));
  // The GEMM precision changes no parameter.
  GptConfig plain = model(6);
  plain.finalize();
  EXPECT_EQ(c.num_parameters(512), plain.num_parameters(512));
}

TEST(Fp8Config, ChecksNameTheFlag) {
  auto message = [](GptConfig c) {
    try {
      c.finalize();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  GptConfig c = model(4);
  c.fp8.format = Fp8Format::E4M3;
  c.fp8.amax_history_len = 0;
  EXPECT_NE(message(c).find("--fp8-amax-history-len"), std::string::npos);
  c.fp8.amax_history_len = 1;
  c.fp8.margin = -1;
  EXPECT_NE(message(c).find("--fp8-margin"), std::string::npos);
  c.fp8.margin = 0;
  c.fp8.first_last_layers_bf16 = true;
  c.fp8.num_layers_at_start_in_bf16 = 3;
  c.fp8.num_layers_at_end_in_bf16 = 2;
  EXPECT_NE(message(c).find("exceed --num-layers 4"), std::string::npos);
  c.fp8.num_layers_at_end_in_bf16 = 1;
  EXPECT_EQ(message(c), "");
}

TEST(Fp8Config, MegatronSpellings) {
  EXPECT_EQ(fp8_format_from_string("hybrid"), Fp8Format::Hybrid);
  EXPECT_EQ(fp8_format_from_string("e4m3"), Fp8Format::E4M3);
  EXPECT_FALSE(fp8_format_from_string("e5m2").has_value());  // Megatron has no all-E5M2 format
  EXPECT_EQ(fp8_recipe_from_string("delayed"), Fp8Recipe::Delayed);
  EXPECT_EQ(fp8_recipe_from_string("tensorwise"), Fp8Recipe::Tensorwise);
  EXPECT_EQ(fp8_recipe_from_string("blockwise"), Fp8Recipe::Blockwise);
  EXPECT_FALSE(fp8_recipe_from_string("mxfp8").has_value());
  for (auto r : {Fp8Recipe::Delayed, Fp8Recipe::Tensorwise, Fp8Recipe::Blockwise})
    EXPECT_EQ(fp8_recipe_from_string(to_string(r)), r);
  EXPECT_EQ(amax_compute_algo_from_string("max"), AmaxComputeAlgo::Max);
  EXPECT_EQ(amax_compute_algo_from_string("most_recent"), AmaxComputeAlgo::MostRecent);
  for (auto f : {Fp8Format::E4M3, Fp8Format::Hybrid}) EXPECT_EQ(fp8_format_from_string(to_string(f)), f);
  Fp8Config d;
  d.format = Fp8Format::Hybrid;
  EXPECT_EQ(d.describe(), "hybrid, delayed (history 1, most_recent, margin 0)");
  d.recipe = Fp8Recipe::Blockwise;
  EXPECT_TRUE(d.blockwise() && !d.delayed());
  EXPECT_EQ(d.describe(),
            "hybrid, blockwise (1x128 activation and gradient blocks, 128x128 weight tiles, power-of-two scales)");
}

}  // namespace
}  // namespace tripod::config
