// `tripod doctor -- TRAIN FLAGS` through the real executable: the predicted
// peak per GPU is `tripod plan`'s for the same layout (one memory model for
// plan, doctor and the out-of-memory advice), a run that fits passes, one
// that does not fails (exit 1) listing layouts predicted to fit, and a
// mistyped training flag is named with its closest flags.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <regex>
#include <string>

#include "testing/run_tripod.h"

namespace {

using tripod::testing::run_tripod;

// GPT-2 1.5B at micro-batch 16, bf16: measured on one H200 at a 60.1 GiB
// allocator peak (bench/RESULTS.md, 2026-12-03).
const std::string kModel = " --num-layers 48 --hidden-size 1600 --num-attention-heads 25 --seq-length 1024 "
                           "--vocab-size 50257 --micro-batch-size 16 --bf16";

double plan_total_gib() {
  const auto out = run_tripod("plan" + kModel + " --global-batch-size 16 --gpus-per-node 1 --gpu-memory-gb 139 "
                              "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 "
                              "--no-distributed-optimizer --recompute-search none --json");
  EXPECT_EQ(out.code, 0) << out.output;
  const auto j = nlohmann::json::parse(out.output.substr(out.output.find('{')));
  return j["layouts"][0]["memory_gib"]["total"].get<double>();
}

double doctor_predicted_gib(const std::string& output) {
  std::smatch m;
  const std::regex re("gpu-memory-fit .*predicted peak ([0-9.]+) GiB per GPU");
  if (!std::regex_search(output, m, re)) {
    ADD_FAILURE() << output;
    return -1;
  }
  return std::stod(m[1]);
}

TEST(DoctorFit, SamePredictionAsPlanAndPassesWhenItFits) {
  const auto out = run_tripod("doctor --gpu-memory-gb 139 --" + kModel);
  EXPECT_NE(out.output.find("[pass] gpu-memory-fit"), std::string::npos) << out.output;
  const double plan = plan_total_gib();
  EXPECT_NEAR(doctor_predicted_gib(out.output), plan, 0.051) << out.output;  // printed to 0.1 GiB
  EXPECT_NEAR(plan - 1.0, 60.1, 0.1 * 60.1);  // the allocator part (less the 1 GiB context) vs measured
}

TEST(DoctorFit, FailsWhenItDoesNotFitAndListsLayoutsThatDo) {
  const auto out = run_tripod("doctor --gpu-memory-gb 40 --" + kModel);
  EXPECT_EQ(out.code, 1) << out.output;
  EXPECT_NE(out.output.find("[fail] gpu-memory-fit"), std::string::npos) << out.output;
  EXPECT_NE(out.output.find("layouts predicted to fit 1 GPU(s) of 40.0 GiB"), std::string::npos) << out.output;
  // Every suggestion is predicted under 40 GiB.
  const std::regex row(R"(\n  [0-9]\. [^(]*\(([0-9.]+) GiB per GPU\): --tensor-model-parallel-size)");
  int rows = 0;
  for (std::sregex_iterator it(out.output.begin(), out.output.end(), row), end; it != end; ++it, ++rows)
    EXPECT_LT(std::stod((*it)[1]), 40.0) << it->str();
  EXPECT_GE(rows, 1) << out.output;
}

// ZeRO-2/-3 (docs/zero.md) in doctor and plan, GPT-2 124M at dp 2, bf16.
// Model states by hand (tests/unit/plan/test_plan_memory.cpp has the
// terms): 124,475,904 params; in use: ZeRO-2 214,382,592 B of gradients,
// ZeRO-3 264,870,912 B (the embedding's backward).
// (tripod keeps the whole f32 values next to the bf16 copy unless ZeRO-3):
//   optim: 124,475,904 x (10 + 16/2) = 2,240,566,272 B = 2.09 GiB
//   zero2: x (6 + 16/2) + 214,382,592 = 1,957,045,248 B = 1.82 GiB
//   zero3: x 16/2 + 264,870,912 = 1,260,678,144 B = 1.17 GiB (bf16 gathered)
//   zero3, 2 instances of 1 rank: x 16/1 + 264,870,912 = 2,256,485,376 B = 2.10 GiB
const std::string kSmall = " --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 "
                           "--vocab-size 50257 --micro-batch-size 4 --bf16";

TEST(DoctorFit, ShardingStrategiesByHand) {
  struct Case {
    const char* flags;
    const char* layout;
    const char* states;
  };
  for (const Case& c : {Case{"--use-distributed-optimizer", "dist-opt", "model states 2.1,"},
                        Case{"--data-parallel-sharding-strategy optim_grads", "zero2", "model states 1.8,"},
                        Case{"--use-megatron-fsdp", "zero3", "model states 1.2,"},
                        Case{"--use-megatron-fsdp --num-distributed-optimizer-instances 2", "zero3 x2-instances",
                             "model states 2.1,"}}) {
    const auto out =
        run_tripod(std::string("launch --nproc-per-node 2 doctor --gpu-memory-gb 80 --no-bandwidth --") + kSmall + " " + c.flags);
    const auto at = out.output.find("gpu-memory-fit");
    ASSERT_NE(at, std::string::npos) << out.output;
    const std::string line = out.output.substr(at, out.output.find('\n', at) - at);
    EXPECT_NE(line.find(std::string("dp2 mbs4 ") + c.layout), std::string::npos) << c.flags << "\n" << line;
    EXPECT_NE(line.find(c.states), std::string::npos) << c.flags << "\n" << line;
  }
  // plan with the strategy: every dp > 1 layout uses it, with its reason.
  const auto plan = run_tripod("plan" + kSmall + " --global-batch-size 16 --gpus-per-node 2 --gpu-memory-gb 80 "
                               "--data-parallel-sharding-strategy optim_grads_params");
  EXPECT_EQ(plan.code, 0) << plan.output;
  EXPECT_NE(plan.output.find("ZeRO-3 (--data-parallel-sharding-strategy optim_grads_params)"), std::string::npos)
      << plan.output;
  EXPECT_EQ(plan.output.find("dist-opt"), std::string::npos) << plan.output;
}

// From a machine without the cluster: --nnodes / --gpus-per-node give the
// layout's world (TP 2 x PP 2 on 2 x 8 GPUs: dp 4), and the `tripod plan`
// command printed for more layouts carries the whole Llama model, so it
// plans the same model (its first layout's flags run that model again).
TEST(DoctorFit, ChecksAClusterLayoutFromHereWithTheFullModel) {
  const std::string llama =
      " --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 "
      "--ffn-hidden-size 14336 --swiglu --normalization RMSNorm --position-embedding-type rope "
      "--untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 128256 --seq-length 8192 "
      "--micro-batch-size 1 --global-batch-size 64 --bf16 --tensor-model-parallel-size 2 "
      "--pipeline-model-parallel-size 2";
  const auto out = run_tripod("doctor --nnodes 2 --gpus-per-node 8 --gpu-memory-gb 40 --" + llama);
  EXPECT_NE(out.output.find("gpu-memory-fit"), std::string::npos) << out.output;
  EXPECT_NE(out.output.find("16 GPU(s) (--gpu-memory-gb 40, 2 node(s) x 8 GPUs): tp2 pp2 dp4"), std::string::npos)
      << out.output;
  const auto more = out.output.find("more: tripod plan ");
  ASSERT_NE(more, std::string::npos) << out.output;
  const std::string cmd = out.output.substr(more + 6, out.output.find('\n', more) - more - 6);
  for (const char* f : {"--ffn-hidden-size 14336", "--swiglu", "--normalization RMSNorm", "--position-embedding-type rope",
                        "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--group-query-attention",
                        "--num-query-groups 8", "--vocab-size 128256", "--seq-length 8192", "--nnodes 2",
                        "--gpus-per-node 8"})
    EXPECT_NE(cmd.find(f), std::string::npos) << f << " missing from: " << cmd;
  // The printed command runs and plans that model (8.03 B parameters).
  const auto plan = run_tripod(cmd.substr(std::string("tripod ").size()) + " --json");
  ASSERT_EQ(plan.code == 0 || plan.code == 1, true) << plan.output;
  const auto j = nlohmann::json::parse(plan.output.substr(plan.output.find('{')));
  EXPECT_NEAR(j["model"]["num_parameters"].get<double>() / 1e9, 8.03, 0.01) << j["model"].dump();
}

TEST(DoctorFit, TrainFlagErrorsAreNamed) {
  const auto out = run_tripod("doctor --gpu-memory-gb 80 -- --hiden-size 5");
  EXPECT_EQ(out.code, 1) << out.output;
  EXPECT_NE(out.output.find("--hiden-size: did you mean --hidden-size"), std::string::npos) << out.output;
  // Without a GPU and without --gpu-memory-gb there is nothing to check against.
  const auto none = run_tripod("doctor --" + kModel, "CUDA_VISIBLE_DEVICES=");
  EXPECT_NE(none.output.find("gpu-memory-fit"), std::string::npos) << none.output;
  EXPECT_EQ(none.output.find("[fail] gpu-memory-fit"), std::string::npos) << none.output;
}

}  // namespace
