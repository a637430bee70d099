// Out of memory through the real executable ($TRIPOD_BIN): with the CPU run
// limited to a device's memory (TRIPOD_CPU_MEMORY_LIMIT_MB), a layout that
// does not fit ends with one error naming the rank, the layout and the
// allocation, plus the layouts `tripod plan` predicts to fit. The first
// suggestion, run with the same limit, must really fit, and its first
// iteration must compute the same loss as the original layout without the
// limit (the global batch is the same; only micro-batching changes).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>

#include "testing/run_tripod.h"

namespace {

using Result = tripod::testing::TripodRun;
Result run(const std::string& env, const std::string& args) { return tripod::testing::run_tripod(args, env); }

double first_loss(const std::string& out) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(out, m, std::regex("lm loss: ([0-9.E+-]+)"))) << out;
  return m.empty() ? 0.0 : std::stod(m[1]);
}

const std::string kModel =
    "train --mock-data --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 "
    "--vocab-size 8192 --train-iters 1 --log-interval 1 --eval-interval 0 ";

TEST(OomAdvice, NamesRankAndSuggestsALayoutThatFits) {
  // Micro-batch 8 needs ~390 MiB here; 150 MiB is too little for it.
  const std::string limit = "TRIPOD_CPU_MEMORY_LIMIT_MB=150";
  Result oom = run(limit, kModel + "--micro-batch-size 8 --global-batch-size 8");
  ASSERT_NE(oom.code, 0) << oom.output;
  EXPECT_NE(oom.output.find("rank 0 (tp rank 0, pp rank 0, dp rank 0; layout tp 1 pp 1 dp 1) ran out of memory"),
            std::string::npos) << oom.output;
  EXPECT_NE(oom.output.find("exceeds TRIPOD_CPU_MEMORY_LIMIT_MB (157286400 bytes)"), std::string::npos) << oom.output;
  EXPECT_NE(oom.output.find("more: tripod plan --num-layers 2 --hidden-size 256"), std::string::npos) << oom.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(oom.output, m, std::regex("\\n  1\\. [^:]*\\(([0-9.]+) GiB per GPU\\): ([^\\n]*)")))
      << oom.output;
  EXPECT_LE(std::stod(m[1]), 150.0 / 1024.0 + 1e-9);  // the prediction itself fits the limit
  const std::string flags = m[2];
  EXPECT_NE(flags.find("--global-batch-size 8"), std::string::npos) << flags;

  Result fit = run(limit, kModel + flags);
  ASSERT_EQ(fit.code, 0) << "suggested layout did not fit: " << flags << "\n" << fit.output;
  Result ref = run("", kModel + "--micro-batch-size 8 --global-batch-size 8");
  ASSERT_EQ(ref.code, 0) << ref.output;
  EXPECT_NEAR(first_loss(fit.output), first_loss(ref.output), 1e-5 * first_loss(ref.output));
}

TEST(OomAdvice, SaysWhenNoLayoutFits) {
  Result oom = run("TRIPOD_CPU_MEMORY_LIMIT_MB=60", kModel + "--micro-batch-size 8 --global-batch-size 8");
  ASSERT_NE(oom.code, 0) << oom.output;
  EXPECT_NE(oom.output.find("no layout of this model fits 1 GPU(s)"), std::string::npos) << oom.output;
  EXPECT_NE(oom.output.find("add GPUs or shrink the model"), std::string::npos) << oom.output;
}

}  // namespace
