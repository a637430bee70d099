// Megatron-LM checkpoints through the tripod CLI:
//  - `tripod convert --import-megatron` of synthetic legacy checkpoints
//    (make_megatron_checkpoint.py: TP 2 x PP 2, TP 1 x PP 2 x vpp 2, TP 2;
//    bf16 and strided tensors, Megatron's per-head QKV rows, local layer
//    numbers) gives tripod tensors equal, bit for bit, to the ones the script
//    wrote in tripod's layout; the same with a file from torch.save itself
//    when PyTorch is installed (skipped otherwise);
//  - a pickle naming os.system is refused, naming the global, and nothing runs;
//    a model tripod does not have (--swiglu) is refused naming the flag (the
//    unpickler on its own: tests/unit/interop/test_torch_pickle.cpp);
//  - --load of a Megatron directory (legacy, torch_dist, release) says what it
//    is and how to convert it.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "base/error.h"
#include "ckpt/safetensors.h"
#include "ckpt/sharded_checkpoint.h"
#include "common.h"

namespace {

using namespace ckpt_test;
using namespace tripod;

int make(const Scratch& s, const std::string& flags, std::string* log) {
  const std::string out = (s / "make.log").string();
  const int rc = sh("/usr/bin/python3 " + env("TRIPOD_SOURCE_DIR") + "/tests/ckpt/make_megatron_checkpoint.py " +
                    s.dir.string() + " " + flags + " > " + out + " 2>&1");
  *log = slurp(out);
  return rc;
}

std::string tripod(const Scratch& s, const std::string& args, int* rc) {
  const std::string out = (s / "tripod.log").string();
  *rc = sh(env("TRIPOD_BIN") + " " + args + " > " + out + " 2>&1");
  return slurp(out);
}

void import_case(const std::string& name, const std::string& flags, int tp, int pp) {
  Scratch s("megatron_" + name);
  std::string log;
  const int made = make(s, flags, &log);
  if (made == 77) GTEST_SKIP() << log;
  ASSERT_EQ(made, 0) << log;
  int rc = 0;
  log = tripod(s, "convert --import-megatron " + (s / "megatron").string() + " --save " + (s / "ck").string(), &rc);
  ASSERT_EQ(rc, 0) << log;
  EXPECT_NE(log.find(fmt::format("TP {} x PP {}", tp, pp)), std::string::npos) << log;
  EXPECT_NE(log.find("at iteration 7, 112 consumed samples"), std::string::npos) << log;

  const auto reader = ckpt::CheckpointReader::open((s / "ck").string());
  EXPECT_EQ(reader.iteration(), 7);
  const auto c = reader.config();
  EXPECT_EQ(c.num_layers, 4);
  EXPECT_EQ(c.hidden_size, 8);
  EXPECT_EQ(c.num_attention_heads, 2);
  EXPECT_EQ(c.ffn_hidden_size, 32);
  EXPECT_EQ(c.vocab_size, 50);
  const auto expected = ckpt::SafetensorsFile::open((s / "expected.safetensors").string());
  ASSERT_EQ(expected.entries().size(), 4u + 4u * 12u);
  for (const auto& e : expected.entries()) {
    SCOPED_TRACE(e.name);
    const Tensor want = expected.read_f32(e.name);
    const Tensor got = reader.read_full(e.name);
    ASSERT_EQ(got.shape(), want.shape());
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << "element " << i;
  }
  fs::remove_all(s.dir);
}

TEST(MegatronImport, Tp2Pp2) { import_case("tp2pp2", "--tp 2 --pp 2", 2, 2); }
TEST(MegatronImport, Tp1Pp2Vpp2) { import_case("vpp", "--tp 1 --pp 2 --vpp 2", 1, 2); }
TEST(MegatronImport, Tp2) { import_case("tp2", "--tp 2", 2, 1); }
// --apply-layernorm-1p: the files hold zero-centered LayerNorm weights; the import adds the 1.
TEST(MegatronImport, ZeroCenteredLayerNormWeights) { import_case("1p", "--tp 2 --apply-layernorm-1p", 2, 1); }
TEST(MegatronImport, TorchSaveTp2Pp2) { import_case("torch", "--tp 2 --pp 2 --writer torch", 2, 2); }

TEST(MegatronImport, PickleNamingOsSystemIsRefused) {
  Scratch s("megatron_evil");
  std::string log;
  ASSERT_EQ(make(s, "--malicious", &log), 0) << log;
  int rc = 0;
  log = tripod(s, "convert --import-megatron " + (s / "megatron").string() + " --save " + (s / "ck").string(), &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(log.find("the global os.system, which is not allowed"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(s / "pwned"));
  EXPECT_FALSE(fs::exists(s / "ck" / "latest_checkpointed_iteration.txt"));
  fs::remove_all(s.dir);
}

TEST(MegatronImport, UnsupportedModelsAreRefusedNamingTheFlag) {
  Scratch s("megatron_swiglu");
  std::string log;
  ASSERT_EQ(make(s, "--tp 2 --swiglu", &log), 0) << log;
  int rc = 0;
  log = tripod(s, "convert --import-megatron " + (s / "megatron").string() + " --save " + (s / "ck").string(), &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(log.find("--swiglu is not supported by the import"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(s / "ck" / "latest_checkpointed_iteration.txt"));
  fs::remove_all(s.dir);
}

TEST(MegatronImport, LoadNamesMegatronCheckpoints) {
  Scratch s("megatron_load");
  std::string log;
  ASSERT_EQ(make(s, "--tp 2 --pp 2", &log), 0) << log;
  const std::string dir = (s / "megatron").string();
  int rc = 0;
  // Any reader of tripod checkpoints: export opens it as `train --load` does.
  log = tripod(s, "convert --load " + dir + " --export-hf " + (s / "hf").string(), &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(log.find("Megatron-LM checkpoint in the legacy torch format (iter_0000007: 4 model-parallel file(s), "
                     "TP 2 x PP 2"), std::string::npos) << log;
  EXPECT_NE(log.find("tripod convert --import-megatron " + dir), std::string::npos) << log;

  // torch_dist: iter_N/.metadata and *.distcp.
  const fs::path dist = s / "dist";
  fs::create_directories(dist / "iter_0000003");
  std::ofstream(dist / "latest_checkpointed_iteration.txt") << "3";
  std::ofstream(dist / "iter_0000003" / ".metadata") << "x";
  std::ofstream(dist / "iter_0000003" / "__0_0.distcp") << "x";
  std::ofstream(dist / "iter_0000003" / "metadata.json") << R"({"sharded_backend": "torch_dist"})";
  log = tripod(s, "convert --load " + dist.string() + " --export-hf " + (s / "hf").string(), &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(log.find("torch_dist format"), std::string::npos) << log;
  EXPECT_NE(log.find("--ckpt-convert-format torch"), std::string::npos) << log;
  log = tripod(s, "convert --import-megatron " + dist.string() + " --save " + (s / "ck").string(), &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(log.find("torch_dist format is not read by tripod"), std::string::npos) << log;

  // A release checkpoint: the marker says "release".
  const fs::path rel = s / "rel";
  fs::create_directories(rel / "release" / "mp_rank_00");
  std::ofstream(rel / "latest_checkpointed_iteration.txt") << "release\n";
  std::ofstream(rel / "release" / "mp_rank_00" / "model_optim_rng.pt") << "x";
  log = tripod(s, "convert --load " + rel.string() + " --export-hf " + (s / "hf").string(), &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(log.find("Megatron-LM checkpoint in the legacy torch format (release"), std::string::npos) << log;
  fs::remove_all(s.dir);
}

}  // namespace
