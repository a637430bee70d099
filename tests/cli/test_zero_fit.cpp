// A model that does not fit one rank's memory under `optim` (ZeRO-1) but
// does under `optim_grads_params` (ZeRO-3), through the real executable:
// 4 CPU ranks, each a "device" of 64 MiB (TRIPOD_CPU_MEMORY_LIMIT_MB).
// `tripod plan` predicts 86.5 MiB per rank under optim and 45.3 MiB under
// optim_grads_params (both checked below, so the cap lies between them);
// under optim the run stops with the out-of-memory advice, which names
// optim_grads_params for the same layout; under optim_grads_params it
// trains, saves and resumes, all under the cap. The save gathers each
// parameter's value and moments from the shards a piece at a time (NOTE
// [Streamed shard save]; it needed 167 MiB on the writing rank when it
// gathered them whole); the load streams each rank's shard one parameter at
// a time (NOTE [Streamed shard load]). The resumed run's losses equal the
// uninterrupted capped run's bit for bit: the checkpoint holds the exact
// fp32 values, moments and step count, the data position and the seed, and
// a ZeRO-3 run at one layout sums in a fixed order, so iterations 3 and 4
// repeat the same arithmetic (compared at full precision, from
// --metrics-file). The same checkpoint resumes under plain `optim` at dp2
// (its moments streamed into that layout's shards) within 1e-5 of the
// uninterrupted run (another dp size sums the gradients in another order).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "testing/run_tripod.h"

namespace {

using tripod::testing::run_tripod;

const std::string kModel =
    "--num-layers 8 --hidden-size 256 --num-attention-heads 4 --seq-length 64 --vocab-size 2000 "
    "--micro-batch-size 1 --global-batch-size 4";
const std::string kLimit = "OMP_NUM_THREADS=1 TRIPOD_CPU_MEMORY_LIMIT_MB=64";

std::string train(const std::string& strategy, const std::string& extra) {
  return "launch --nproc-per-node 4 train --device cpu " + kModel + " --data-parallel-sharding-strategy " + strategy +
         " --lr-decay-iters 4 --mock-data --log-interval 1 --eval-interval 0 " + extra;
}

double predicted_mib(const std::string& strategy) {
  const auto plan = run_tripod("plan " + kModel + " --gpus-per-node 4 --fp32 --tensor-model-parallel-size 1 "
                               "--pipeline-model-parallel-size 1 --recompute-search none --device cpu "
                               "--op-times assumed --json --data-parallel-sharding-strategy " + strategy);
  EXPECT_EQ(plan.code, 0) << plan.output;
  const auto j = nlohmann::json::parse(plan.output.substr(plan.output.find("{\n")));
  EXPECT_FALSE(j["layouts"].empty()) << plan.output;
  return j["layouts"][0]["memory_gib"]["total"].get<double>() * 1024;
}

std::vector<double> losses(const std::string& out) {
  std::vector<double> v;
  const std::regex loss(R"(lm loss: ([0-9.E+-]+))");
  for (std::sregex_iterator it(out.begin(), out.end(), loss), end; it != end; ++it) v.push_back(std::stod((*it)[1]));
  return v;
}

// The losses at full precision, from a --metrics-file.
std::vector<double> exact_losses(const std::string& metrics_file) {
  std::vector<double> v;
  std::ifstream in(metrics_file);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) v.push_back(nlohmann::json::parse(line)["lm_loss"].get<double>());
  return v;
}

TEST(ZeroFit, OnlyOptimGradsParamsFitsAndTrains) {
  EXPECT_GT(predicted_mib("optim"), 64.0);
  EXPECT_LT(predicted_mib("optim_grads_params"), 64.0);

  const auto oom = run_tripod(train("optim", "--train-iters 2"), kLimit);
  ASSERT_NE(oom.code, 0) << oom.output;
  EXPECT_NE(oom.output.find("layout tp 1 pp 1 dp 4) ran out of memory"), std::string::npos) << oom.output;
  EXPECT_NE(oom.output.find("this layout fits with --data-parallel-sharding-strategy optim_grads_params"),
            std::string::npos) << oom.output;

  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("tripod_zero_fit_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto metrics = [&](const std::string& name) { return " --metrics-file " + dir + "/" + name + ".jsonl"; };
  const auto full = run_tripod(train("optim_grads_params", "--train-iters 4" + metrics("full")), kLimit);
  ASSERT_EQ(full.code, 0) << full.output;
  const std::vector<double> ref = exact_losses(dir + "/full.jsonl");
  ASSERT_EQ(ref.size(), 4u) << full.output;

  const std::string ck = dir + "/ck";
  const auto first = run_tripod(
      train("optim_grads_params", "--train-iters 2 --save " + ck + " --save-interval 2" + metrics("first")), kLimit);
  ASSERT_EQ(first.code, 0) << first.output;
  ASSERT_NE(first.output.find("saved checkpoint at iteration 2"), std::string::npos) << first.output;
  const auto resumed = run_tripod(train("optim_grads_params", "--train-iters 4 --load " + ck + metrics("resumed")),
                                  kLimit);
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  const auto dp2 = run_tripod("launch --nproc-per-node 2 train --device cpu " + kModel +
                              " --data-parallel-sharding-strategy optim --lr-decay-iters 4 --mock-data "
                              "--log-interval 1 --eval-interval 0 --train-iters 4 --load " + ck, "OMP_NUM_THREADS=1");
  ASSERT_EQ(dp2.code, 0) << dp2.output;
  const std::vector<double> c = losses(dp2.output);
  ASSERT_EQ(c.size(), 2u) << dp2.output;
  for (int i = 0; i < 2; ++i)
    EXPECT_NEAR(c[size_t(i)], ref[size_t(i) + 2], 1e-5 * ref[size_t(i) + 2]) << "dp2 optim, iteration " << i + 3;
  const std::vector<double> a = exact_losses(dir + "/first.jsonl"), b = exact_losses(dir + "/resumed.jsonl");
  ASSERT_EQ(a.size(), 2u) << first.output;
  ASSERT_EQ(b.size(), 2u) << resumed.output;
  for (int i = 0; i < 2; ++i) EXPECT_EQ(a[size_t(i)], ref[size_t(i)]) << "iteration " << i + 1;
  for (int i = 0; i < 2; ++i) EXPECT_EQ(b[size_t(i)], ref[size_t(i) + 2]) << "iteration " << i + 3 << " after resume";
  std::filesystem::remove_all(dir);
}

}  // namespace
