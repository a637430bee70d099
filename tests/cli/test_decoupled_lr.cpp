// Megatron's --decoupled-lr through `tripod train`: after one step, the word
// embeddings and the untied output layer are exactly those of a run at
// --lr = the decoupled lr, and every other parameter (the position
// embeddings included) exactly that of a run without the flag: bit for bit,
// read from each run's checkpoint. Single process and dp2 with the
// distributed optimizer (the sharded update).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "ckpt/safetensors.h"
#include "testing/run_tripod.h"

namespace {

namespace fs = std::filesystem;
using tripod::testing::run_tripod;

const char* kModel =
    "train --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --max-position-embeddings 16 "
    "--vocab-size 64 --mock-data --micro-batch-size 2 --global-batch-size 4 --train-iters 1 --eval-interval 0 "
    "--untie-embeddings-and-output-weights --lr-decay-style constant --weight-decay 0.1 ";

bool same_bytes(const tripod::Tensor& a, const tripod::Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.numel()) * 4) == 0;
}

void check(const std::string& launch, const std::string& extra) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("tripod_decoupled_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto run = [&](const std::string& name, const std::string& lr) {
    auto r = run_tripod(launch + kModel + extra + lr + " --save " + (dir / name).string());
    EXPECT_EQ(r.code, 0) << r.output;
    return tripod::ckpt::SafetensorsFile::open((dir / name / "iter_0000001" / "model_rank_0_0.safetensors").string());
  };
  const auto both = run("both", "--lr 1e-3 --decoupled-lr 4e-3 --decoupled-min-lr 1e-4");
  const auto base = run("base", "--lr 1e-3");
  const auto high = run("high", "--lr 4e-3");
  int decoupled = 0, others = 0;
  for (const auto& e : both.entries()) {
    const bool emb = e.name.find("word_embeddings") != std::string::npos || e.name.find("output_layer") != std::string::npos;
    const tripod::Tensor got = both.read_f32(e.name);
    EXPECT_TRUE(same_bytes(got, (emb ? high : base).read_f32(e.name))) << e.name;
    if (e.name.rfind("optim.", 0) == 0) continue;  // Adam's moments after one step do not depend on the lr
    if (emb) EXPECT_FALSE(same_bytes(got, base.read_f32(e.name))) << e.name << ": the decoupled lr took no effect";
    (emb ? decoupled : others)++;
  }
  EXPECT_EQ(decoupled, 2);  // embedding.word_embeddings.weight, output_layer.weight
  EXPECT_GT(others, 10);  // the position embeddings, the layers and the final norm
  fs::remove_all(dir);
}

TEST(DecoupledLr, EmbeddingAndOutputLayerStepAtTheirOwnLr) { check("", ""); }
TEST(DecoupledLr, TheSameUnderTheDistributedOptimizer) {
  check("launch --nproc-per-node 2 -- ", "--use-distributed-optimizer ");
}

TEST(DecoupledLr, MinimumAboveThePeakIsRefused) {
  auto r = run_tripod(std::string(kModel) + "--lr 1e-3 --decoupled-lr 1e-4 --min-lr 5e-4");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--decoupled-lr 0.0001 is below its minimum 0.0005"), std::string::npos) << r.output;
}

}  // namespace
