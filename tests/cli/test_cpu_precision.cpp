// A GPU job script on the CPU backend, through the real executable
// ($TRIPOD_BIN): --fp16 / --bf16 are emulated (backend/cpu/half.h) and
// --distributed-backend nccl is Gloo there, with one log line.
//  - The seed guide's Megatron script (pretrain_gpt.py flags: --fp16,
//    --distributed-backend nccl, TP 2, GPT-2 BPE files, cosine decay,
//    --save/--load, --split 949,50,1) runs on CPU with only the model and
//    batch sizes made small; its fp16 steps overflow at the initial loss
//    scale 2^32 and are skipped with Megatron's hysteresis, as on a GPU.
//  - fp16 with one forced overflow (--inject-grad-overflow-at) skips exactly
//    that step and halves the scale, and the lr schedule does not advance
//    on it: checked against the same run without the overflow.
//  - A command line with several problems gets them all in one error.
// bf16/fp16 against fp32 and across layouts: tests/parity (parity_bf16_*).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "testing/byte_level.h"
#include "testing/megatron_dataset.h"
#include "testing/run_tripod.h"

namespace {

namespace fs = std::filesystem;
using tripod::testing::run_tripod;

void write_dataset(const std::string& prefix, const std::vector<std::vector<uint16_t>>& docs) {
  tripod::testing::write_megatron_dataset(prefix, docs);
}

std::vector<nlohmann::json> read_train_metrics(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("lm_loss") && j.contains("loss_scale")) out.push_back(j);
  }
  return out;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

class CpuPrecision : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("tripod_cpu_precision_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    // GPT-2 BPE files: the 256 byte tokens, two merges, <|endoftext|> (259 tokens).
    nlohmann::json enc;
    for (int b = 0; b < 256; ++b) enc[tripod::testing::spelled(std::string(1, static_cast<char>(b)))] = b;
    enc["he"] = 256;
    enc[tripod::testing::spelled(" ") + "t"] = 257;
    enc["<|endoftext|>"] = 258;
    std::ofstream(dir / "gpt2-vocab.json") << enc.dump();
    std::ofstream(dir / "gpt2-merges.txt") << "#version: 0.2\nh e\n" << tripod::testing::spelled(" ") << " t\n";
    std::vector<std::vector<uint16_t>> docs;
    for (int d = 0; d < 200; ++d) {
      std::vector<uint16_t> doc;
      for (int i = 0; i < 40; ++i) doc.push_back(static_cast<uint16_t>((97 + d + i * (1 + d % 3)) % 258));
      doc.push_back(258);
      docs.push_back(doc);
    }
    write_dataset((dir / "my_gpt_text_document").string(), docs);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir);
  }
  fs::path dir;
};

// The script of the seed guide's section 4.1, model and batch sizes made
// small (24 x 1024 -> 2 x 32, micro/global batch 4/256 -> 2/8, 5000 ->
// 4 iterations, a small --eval-iters); every other flag as it is.
TEST_F(CpuPrecision, MegatronScriptWithFp16AndNcclRunsOnCpu) {
  const std::string ck = (dir / "checkpoints").string(), metrics = (dir / "m.jsonl").string();
  const std::string script =
      "launch --nproc-per-node 2 --nnodes 1 --node-rank 0 --master-addr localhost -- train "
      "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16 "
      "--micro-batch-size 2 --global-batch-size 8 --lr 0.00015 --train-iters 4 --lr-decay-iters 320000 "
      "--lr-decay-style cosine --min-lr 1.0e-5 --weight-decay 1e-2 --clip-grad 1.0 --fp16 "
      "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 "
      "--data-path " + (dir / "my_gpt_text_document").string() + " --vocab-file " + (dir / "gpt2-vocab.json").string() +
      " --merge-file " + (dir / "gpt2-merges.txt").string() + " --split 949,50,1 "
      "--load " + ck + " --save " + ck + " --save-interval 1000 --distributed-backend nccl "
      "--eval-iters 2 --log-interval 1 --device cpu --metrics-file " + metrics;
  auto r = run_tripod(script);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count(r.output, "--distributed-backend nccl on a CPU run: using Gloo"), 1) << r.output;
  EXPECT_TRUE(fs::exists(fs::path(ck) / "iter_0000004")) << r.output;
  // fp16 at the initial scale 2^32 overflows (as on a GPU, where Megatron's
  // runs skip their first steps): every step is skipped; with hysteresis 2
  // the first overflow keeps the scale, each later one halves it.
  const auto m = read_train_metrics(metrics);
  ASSERT_EQ(m.size(), 4u);
  const double s32 = 4294967296.0;
  const double want[] = {s32, s32 / 2, s32 / 4, s32 / 8};  // logged after the iteration's update
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(m[i]["skipped_iters"].get<int64_t>(), 1) << "iteration " << i + 1;
    EXPECT_EQ(m[i]["loss_scale"].get<double>(), want[i]) << "iteration " << i + 1;
  }
}

// One overflow at iteration 3 (scale 1024, where this model's fp16
// gradients are finite): exactly that step is skipped, the scale halves
// (--hysteresis 1), and the next step runs at the lr the clean run used at
// iteration 3 (the schedule counts successful updates only, as Megatron's).
TEST_F(CpuPrecision, Fp16ForcedOverflowSkipsOneStepAndHalvesTheScale) {
  const std::string base =
      "train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 259 --mock-data "
      "--micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --lr-warmup-iters 2 --lr-decay-style linear "
      "--train-iters 5 --log-interval 1 --eval-iters 0 --device cpu --fp16 --initial-loss-scale 1024 "
      "--hysteresis 1 --metrics-file ";
  auto clean = run_tripod(base + (dir / "clean.jsonl").string());
  ASSERT_EQ(clean.code, 0) << clean.output;
  auto hit = run_tripod(base + (dir / "hit.jsonl").string() + " --inject-grad-overflow-at 3");
  ASSERT_EQ(hit.code, 0) << hit.output;
  const auto c = read_train_metrics(dir / "clean.jsonl"), h = read_train_metrics(dir / "hit.jsonl");
  ASSERT_EQ(c.size(), 5u);
  ASSERT_EQ(h.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(c[i]["skipped_iters"].get<int64_t>(), 0) << "clean run, iteration " << i + 1;
    EXPECT_EQ(c[i]["loss_scale"].get<double>(), 1024.0);
    EXPECT_EQ(h[i]["skipped_iters"].get<int64_t>(), i == 2 ? 1 : 0) << "iteration " << i + 1;
    EXPECT_EQ(h[i]["loss_scale"].get<double>(), i < 2 ? 1024.0 : 512.0) << "iteration " << i + 1;
  }
  // Before the overflow the runs are the same run.
  EXPECT_EQ(h[1]["lm_loss"].get<double>(), c[1]["lm_loss"].get<double>());
  // After it, the lr is one update behind.
  EXPECT_EQ(h[3]["lr"].get<double>(), c[2]["lr"].get<double>());
  EXPECT_EQ(h[4]["lr"].get<double>(), c[3]["lr"].get<double>());
}

// Four problems (an unknown flag, a Megatron flag tripod does not take, a
// layout the ranks cannot form, a bad interval) in one error, each with its
// fix; no source location for these user errors unless asked for.
TEST_F(CpuPrecision, EveryProblemOfACommandLineAtOnce) {
  const std::string bad =
      "train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 259 --mock-data "
      "--micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --train-iters 5 --device cpu --fp16 "
      "--distributed-backend nccl --tensor-model-parallel-size 2 --log-interval 0 --add-qkv-bias --no-such-flag";
  auto r = run_tripod(bad);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("4 problems with the command line:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1. unknown flag(s) --no-such-flag"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2. --add-qkv-bias is a Megatron-LM flag"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("3. world size 1 is not divisible by --tensor-model-parallel-size 2"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("4. --log-interval is 0"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("raised at"), std::string::npos) << r.output;
  // One problem: as before, with its hint; its source only on request.
  const std::string one =
      "train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 259 --mock-data "
      "--micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --train-iters 5 --device cpu --log-interval 0";
  r = run_tripod(one);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("error: --log-interval is 0\n  hint: use --log-interval >= 1"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("raised at"), std::string::npos) << r.output;
  r = run_tripod(one, "TRIPOD_ERROR_SOURCE=1");
  EXPECT_NE(r.output.find("(raised at src/train/trainer.cpp:"), std::string::npos) << r.output;
}

}  // namespace
