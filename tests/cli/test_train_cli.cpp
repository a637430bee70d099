// `tripod train` through the real executable ($TRIPOD_BIN):
//  - on a small learnable .bin/.idx pair written here byte by byte in
//    Megatron's MMIDIDX layout, the loss falls well below its start within
//    200 iterations (read back from --metrics-file);
//  - bad input (missing or truncated data files, impossible flag
//    combinations) gives one clear error naming the file or flag, non-zero exit.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "testing/megatron_dataset.h"
#include "testing/run_tripod.h"

namespace {

namespace fs = std::filesystem;

using Result = tripod::testing::TripodRun;
Result run(const std::string& args) { return tripod::testing::run_tripod(args); }

void write_dataset(const std::string& prefix, const std::vector<std::vector<uint16_t>>& docs) {
  tripod::testing::write_megatron_dataset(prefix, docs);
}

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("tripod_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    // 200 documents; each counts up by a per-document stride modulo 64.
    std::vector<std::vector<uint16_t>> docs;
    for (int d = 0; d < 200; ++d) {
      std::vector<uint16_t> doc;
      const int stride = 1 + d % 3;
      for (int i = 0; i < 40; ++i) doc.push_back(static_cast<uint16_t>((d + i * stride) % 64));
      docs.push_back(doc);
    }
    prefix = (dir / "counting").string();
    write_dataset(prefix, docs);
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string base() const {
    return "train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64 "
           "--micro-batch-size 8 --global-batch-size 8 --lr 3e-3 --lr-warmup-iters 10 --log-interval 10 "
           "--eval-interval 100 --eval-iters 2 --split 90,10,0 ";
  }
  fs::path dir;
  std::string prefix;
};

TEST_F(TrainCli, LossFallsOnIndexedData) {
  const std::string metrics = (dir / "m.jsonl").string();
  Result r = run(base() + "--train-iters 200 --data-path " + prefix + " --metrics-file " + metrics);
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(metrics);
  std::string line;
  double first = -1, last = -1, val = -1;
  while (std::getline(in, line)) {
    auto key = [&](const char* k) -> double {
      auto p = line.find(std::string("\"") + k + "\":");
      return p == std::string::npos ? -1 : std::stod(line.substr(p + std::string(k).size() + 3));
    };
    if (key("lm_loss") >= 0) {
      if (first < 0) first = key("lm_loss");
      last = key("lm_loss");
    }
    if (key("val_loss") >= 0) val = key("val_loss");
  }
  ASSERT_GT(first, 0) << "no training records in " << metrics;
  EXPECT_GT(first, 3.5);        // near ln(64) = 4.16 at the start
  EXPECT_LT(last, 0.5 * first);  // and well below it after 200 iterations
  EXPECT_GT(val, 0);
  EXPECT_LT(val, 0.5 * first);
  EXPECT_NE(r.output.find("validation loss at iteration 200"), std::string::npos);
}

TEST_F(TrainCli, MissingDataFileNamesIt) {
  fs::remove(prefix + ".bin");
  Result r = run(base() + "--train-iters 20 --data-path " + prefix);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find(prefix + ".bin"), std::string::npos) << r.output;
}

TEST_F(TrainCli, TruncatedIndexNamesIt) {
  fs::resize_file(prefix + ".idx", 40);
  Result r = run(base() + "--train-iters 20 --data-path " + prefix);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find(prefix + ".idx"), std::string::npos) << r.output;
}

TEST_F(TrainCli, HeadsMustDivideHidden) {
  Result r = run(base() + "--train-iters 20 --mock-data --num-attention-heads 5");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--num-attention-heads"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hint:"), std::string::npos) << r.output;
}

TEST_F(TrainCli, GlobalBatchMustDivideByMicroBatch) {
  Result r = run(base() + "--train-iters 20 --mock-data --global-batch-size 12");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--global-batch-size 12"), std::string::npos) << r.output;
}

TEST_F(TrainCli, TokenIdsBeyondVocabAreCaughtBeforeTraining) {
  Result r = run(base() + "--train-iters 20 --data-path " + prefix + " --vocab-size 32 --make-vocab-size-divisible-by 1");
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(r.output.find("iteration        1/"), std::string::npos) << r.output;
}

TEST_F(TrainCli, InterleavedLayoutLogsItsVirtualPipelineSize) {
  // 4 layers over PP 2 with 1 layer per virtual stage: 2 virtual stages per rank.
  Result r = run("launch --nproc-per-node 2 " + base() +
                 "--train-iters 1 --lr-warmup-iters 0 --mock-data --num-layers 4 "
                 "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --micro-batch-size 2");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("tp 1 x dp 1 x pp 2 (vpp 2)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("(vpp 1)"), std::string::npos) << r.output;
}

TEST_F(TrainCli, HelpListsMegatronFlags) {
  Result r = run("train --help");
  EXPECT_EQ(r.code, 0);
  for (const char* f : {"--tensor-model-parallel-size", "--micro-batch-size", "--lr-decay-style", "--data-path"})
    EXPECT_NE(r.output.find(f), std::string::npos) << f;
}

}  // namespace
