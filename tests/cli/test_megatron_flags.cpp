// docs/megatron-flags.md against `tripod train`: every flag in the page's
// tables parses as its row says (implemented: accepted silently; accepted:
// parses and logs its note; rejected: stops with its note), plus the derived
// flags' arithmetic and the closest-name hint for unknown flags.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "testing/run_tripod.h"

namespace {

using tripod::testing::run_tripod;

struct Row {
  std::string flag, takes, answer, note;
};

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<Row> doc_rows() {
  const char* src = std::getenv("TRIPOD_SOURCE_DIR");
  std::ifstream f(std::string(src ? src : ".") + "/docs/megatron-flags.md");
  std::vector<Row> rows;
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("| `--", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    std::string cell;
    while (std::getline(ss, cell, '|')) cells.push_back(trim(cell));
    if (cells.size() < 4) continue;
    Row r{cells[0].substr(1, cells[0].size() - 2), cells[1], cells[2], cells[3]};
    rows.push_back(r);
  }
  return rows;
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

}  // namespace

TEST(MegatronFlags, EveryDocumentedFlagParsesAsTheTableSays) {
  const auto rows = doc_rows();
  ASSERT_GT(rows.size(), 300u) << "docs/megatron-flags.md tables not found";
  int counts[3] = {0, 0, 0};
  for (const auto& r : rows) {
    std::string args = "train --parse-only --train-iters 10 " + r.flag;
    // Flags whose value is a name, not a number.
    if (r.flag == "--position-embedding-type") args += " rope";
    else if (r.flag == "--normalization") args += " RMSNorm";
    else if (r.takes == "value") args += " 1";
    else if (r.takes == "list") args += " 1 1";
    else ASSERT_EQ(r.takes, "—") << r.flag;
    const auto run = run_tripod(args);
    if (r.answer == "implemented") {
      ++counts[0];
      EXPECT_EQ(run.code, 0) << r.flag << ": " << run.output;
      EXPECT_FALSE(contains(run.output, "accepted and ignored")) << r.flag << ": " << run.output;
    } else if (r.answer == "accepted") {
      ++counts[1];
      EXPECT_EQ(run.code, 0) << r.flag << ": " << run.output;
      EXPECT_TRUE(contains(run.output, r.flag + ": accepted and ignored: " + r.note)) << r.flag << ": " << run.output;
    } else {
      ++counts[2];
      ASSERT_EQ(r.answer, "rejected") << r.flag;
      EXPECT_NE(run.code, 0) << r.flag << ": " << run.output;
      EXPECT_TRUE(contains(run.output, r.flag + " is a Megatron-LM flag that tripod does not take: " + r.note))
          << r.flag << ": " << run.output;
    }
  }
  EXPECT_GT(counts[0], 50);
  EXPECT_GT(counts[1], 20);
  EXPECT_GT(counts[2], 100);
}

TEST(MegatronFlags, IssueFlagsAreAnswered) {
  // The flags a Megatron job script brought in first.
  for (const char* f : {"--distributed-backend nccl", "--num-workers 2", "--data-impl mmap", "--use-flash-attn",
                        "--log-throughput", "--DDP-impl local", "--lr-warmup-fraction 0.01", "--exit-interval 5",
                        "--exit-duration-in-mins 230"}) {
    const auto run = run_tripod(std::string("train --parse-only --train-iters 10 ") + f);
    EXPECT_EQ(run.code, 0) << f << ": " << run.output;
  }
}

TEST(MegatronFlags, WarmupFractionOfTheDecayIterations) {
  auto run = run_tripod("train --parse-only --train-iters 1000 --lr-warmup-fraction 0.01");
  EXPECT_TRUE(contains(run.output, "lr warmup 10 iterations")) << run.output;
  run = run_tripod("train --parse-only --train-iters 1000 --lr-decay-iters 500 --lr-warmup-fraction 0.1");
  EXPECT_TRUE(contains(run.output, "lr warmup 50 iterations")) << run.output;
  run = run_tripod("train --parse-only --train-iters 1000 --lr-warmup-iters 5 --lr-warmup-fraction 0.1");
  EXPECT_NE(run.code, 0);
  EXPECT_TRUE(contains(run.output, "--lr-warmup-fraction and --lr-warmup-iters are both given")) << run.output;
}

TEST(MegatronFlags, UnknownFlagSuggestsTheClosestNames) {
  auto run = run_tripod("train --parse-only --train-iters 10 --lr-warmup-fractoin 0.1");
  EXPECT_NE(run.code, 0);
  EXPECT_TRUE(contains(run.output, "unknown flag(s) --lr-warmup-fractoin")) << run.output;
  EXPECT_TRUE(contains(run.output, "did you mean --lr-warmup-fraction")) << run.output;
  run = run_tripod("train --parse-only --train-iters 10 --tensor-parallel-size 2");
  EXPECT_TRUE(contains(run.output, "--tensor-model-parallel-size")) << run.output;
}

TEST(TrainDefaults, DeviceIsChosenAndLogged) {
  // No --device: cuda when this build has CUDA and a GPU is visible, else cpu,
  // and the start-up log says which and why.
  auto run = run_tripod("train --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 "
                        "--mock-data --vocab-size 64 --micro-batch-size 2 --train-iters 1 --eval-interval 100");
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "device: cpu (") || contains(run.output, "device: cuda (")) << run.output;
  EXPECT_TRUE(contains(run.output, "; --device overrides)")) << run.output;
  run = run_tripod("train --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 "
                   "--mock-data --vocab-size 64 --micro-batch-size 2 --train-iters 1 --eval-interval 100 "
                   "--device cpu");
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_FALSE(contains(run.output, "--device overrides")) << run.output;
}
