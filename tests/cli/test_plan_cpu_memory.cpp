// `tripod plan --device cpu` predicts what each layout of the parity suite
// really allocates: the layout runs through `tripod launch ... train
// --device cpu` (fp32, 2 iterations), every rank logs its allocator peak
// ("memory on rank ...: ... allocator peak X MiB"), and the plan's
// allocator_peak (busiest stage) must be within 10% of the largest.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "testing/run_tripod.h"

namespace {

const std::string kModel =
    "--num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --vocab-size 2000 "
    "--micro-batch-size 2 --global-batch-size 8";

struct Case {
  const char* name;
  int nproc;
  const char* layout;     // train and plan flags
  const char* plan_only;  // pins the plan's search to the same layout
  const char* train_only = "";
};

const Case kCases[] = {
    {"dp1 (grad accumulation 4)", 1, "", "--no-distributed-optimizer"},
    {"tp2", 2, "--tensor-model-parallel-size 2", "--no-sequence-parallel --no-distributed-optimizer"},
    {"tp2 sp", 2, "--tensor-model-parallel-size 2 --sequence-parallel", "--no-distributed-optimizer"},
    {"pp2", 2, "--pipeline-model-parallel-size 2", "--no-distributed-optimizer --virtual-pipeline-search 1"},
    {"pp2 vpp2", 2, "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1",
     "--no-distributed-optimizer"},
    {"dp2 distributed optimizer", 2, "--use-distributed-optimizer",
     "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1"},
    {"tp2 pp2 dp2 vpp2 sp distributed optimizer", 8,
     "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 "
     "--sequence-parallel --use-distributed-optimizer",
     ""},
};

void check_case(const Case& c) {
  {
    SCOPED_TRACE(c.name);
    const std::string np = std::to_string(c.nproc);
    const auto run = tripod::testing::run_tripod("launch --nproc-per-node " + np + " train --device cpu " + kModel +
                                                     " " + c.layout + " " + c.train_only +
                                                     " --mock-data --train-iters 2 --log-interval 1 --eval-interval 0",
                                                 "OMP_NUM_THREADS=1");
    ASSERT_EQ(run.code, 0) << run.output;
    double measured = 0;
    int ranks = 0;
    const std::regex peak(R"(allocator peak ([0-9.]+) MiB)");
    for (std::sregex_iterator it(run.output.begin(), run.output.end(), peak), end; it != end; ++it, ++ranks)
      measured = std::max(measured, std::stod((*it)[1]));
    ASSERT_EQ(ranks, c.nproc) << run.output;

    const auto plan = tripod::testing::run_tripod("plan " + kModel + " --gpus-per-node " + np + " --fp32 " +
                                                  c.layout + " " + c.plan_only +
                                                  " --recompute-search none --device cpu --op-times assumed --json");
    ASSERT_EQ(plan.code, 0) << plan.output;
    const auto j = nlohmann::json::parse(plan.output.substr(plan.output.find("{\n")));
    ASSERT_FALSE(j["layouts"].empty()) << plan.output;
    const double predicted = j["layouts"][0]["memory_gib"]["allocator_peak"].get<double>() * 1024;
    EXPECT_NEAR(predicted / measured, 1.0, 0.10) << "predicted " << predicted << " MiB, measured " << measured
                                                 << " MiB (" << j["layouts"][0].dump() << ")";
  }
}

TEST(PlanCpuMemory, EveryParityLayoutWithin10Percent) {
  for (const Case& c : kCases) check_case(c);
}

// Context parallelism: each rank's activations and scratch for s/cp rows,
// the K/V ring's buffers, the whole parameters.
TEST(PlanCpuMemory, ContextParallelWithin10Percent) {
  const Case cases[] = {
      {"cp2", 2, "--context-parallel-size 2",
       "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --no-distributed-optimizer"},
      {"tp2 cp2 sp distributed optimizer", 4,
       "--tensor-model-parallel-size 2 --context-parallel-size 2 --sequence-parallel --use-distributed-optimizer",
       "--pipeline-model-parallel-size 1"},
  };
  for (const Case& c : cases) check_case(c);
}

// MoE layers (docs/moe.md, "Memory and the planner"): the router, the N k
// permuted rows and the experts' activations in place of the dense MLP's,
// the backward's dispatch buffers, every expert's parameters.
TEST(PlanCpuMemory, MoeWithin10Percent) {
  const Case cases[] = {
      {"moe dp1", 1,
       "--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 256 --moe-shared-expert-intermediate-size 128",
       "--no-distributed-optimizer"},
  };
  for (const Case& c : cases) check_case(c);
}

// Every --data-parallel-sharding-strategy (docs/zero.md) at dp 2, dp 4 and
// tp 2 x dp 2: ZeRO-2's gradients and ZeRO-3's gathered layers in use
// (plan::sharded_working_bytes), one layer gathered or two with the
// prefetch. The measured peaks are in docs/plan.md.
TEST(PlanCpuMemory, ShardingStrategiesWithin10Percent) {
  const char* strategies[] = {"no_shard", "optim", "optim_grads", "optim_grads_params"};
  std::vector<std::string> layouts;
  for (const char* s : strategies) layouts.push_back(std::string("--data-parallel-sharding-strategy ") + s);
  for (const std::string& layout : layouts) {
    const Case dp2{"dp2", 2, layout.c_str(), "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1"};
    const Case dp4{"dp4", 4, layout.c_str(), "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1"};
    const std::string tp = "--tensor-model-parallel-size 2 --sequence-parallel " + layout;
    const Case tp2dp2{"tp2 dp2 sp", 4, tp.c_str(), "--pipeline-model-parallel-size 1"};
    for (const Case& c : {dp2, dp4, tp2dp2}) {
      SCOPED_TRACE(layout);
      check_case(c);
    }
  }
  check_case({"dp4 zero3 prefetch", 4, "--data-parallel-sharding-strategy optim_grads_params --overlap-param-gather",
              "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1", "--overlap-grad-reduce"});
}

}  // namespace
