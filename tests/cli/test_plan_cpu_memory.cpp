// `tripod plan --device cpu` predicts what each layout of the parity suite
// really allocates: the layout runs through `tripod launch ... train
// --device cpu` (fp32 unless a case says --bf16, 2 iterations), every rank logs its allocator peak
// ("memory on rank ...: ... allocator peak X MiB"), and the plan's
// allocator_peak (busiest stage) must be within 10% of the largest.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "plan/memory_model.h"
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
  bool bf16 = false;  // --bf16 for train and plan (else fp32)
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

// The largest allocator peak (MiB) any rank of the training run logs.
double measured_peak_mib(const Case& c) {
  const std::string np = std::to_string(c.nproc);
  const auto run = tripod::testing::run_tripod("launch --nproc-per-node " + np + " train --device cpu " + kModel +
                                                   (c.bf16 ? " --bf16 " : " ") + c.layout + " " + c.train_only +
                                                   " --mock-data --train-iters 2 --log-interval 1 --eval-interval 0",
                                               "OMP_NUM_THREADS=1");
  EXPECT_EQ(run.code, 0) << run.output;
  double measured = 0;
  int ranks = 0;
  const std::regex peak(R"(allocator peak ([0-9.]+) MiB)");
  for (std::sregex_iterator it(run.output.begin(), run.output.end(), peak), end; it != end; ++it, ++ranks)
    measured = std::max(measured, std::stod((*it)[1]));
  EXPECT_EQ(ranks, c.nproc) << run.output;
  return measured;
}

// `tripod plan`'s allocator peak (MiB) for the case's layout.
double plan_peak_mib(const Case& c) {
  const auto plan = tripod::testing::run_tripod("plan " + kModel + " --gpus-per-node " + std::to_string(c.nproc) +
                                                (c.bf16 ? " --bf16 " : " --fp32 ") + c.layout + " " + c.plan_only +
                                                " --recompute-search none --device cpu --op-times assumed --json");
  EXPECT_EQ(plan.code, 0) << plan.output;
  if (plan.code != 0 || plan.output.find("{\n") == std::string::npos) return -1;
  const auto j = nlohmann::json::parse(plan.output.substr(plan.output.find("{\n")));
  EXPECT_FALSE(j["layouts"].empty()) << plan.output;
  if (j["layouts"].empty()) return -1;
  return j["layouts"][0]["memory_gib"]["allocator_peak"].get<double>() * 1024;
}

void check_case(const Case& c) {
  {
    SCOPED_TRACE(c.name);
    const double measured = measured_peak_mib(c);
    if (::testing::Test::HasFailure()) return;
    const double predicted = plan_peak_mib(c);
    EXPECT_NEAR(predicted / measured, 1.0, 0.10) << "predicted " << predicted << " MiB, measured " << measured
                                                 << " MiB";
  }
}

TEST(PlanCpuMemory, EveryParityLayoutWithin10Percent) {
  for (const Case& c : kCases) check_case(c);
}

// FP8 with --fp8-param-gather at dp 2 (the distributed optimizer): the
// plan adds the FP8 gather's buffers (plan::Fp8Bytes::param_gather; the
// embedding's bucket gathers whole, so no packed f32 gather). Measured:
// 28.7 MiB with and without the flag (the gather at the start of the step
// stays under the step's peak); the plan says 28.6 and 29.8.
TEST(PlanCpuMemory, Fp8ParamGatherWithin10Percent) {
  const Case cases[] = {
      {"dp2 fp8", 2, "--use-distributed-optimizer --fp8-format hybrid",
       "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1"},
      {"dp2 fp8 param gather", 2, "--use-distributed-optimizer --fp8-format hybrid --fp8-param-gather",
       "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1"},
  };
  for (const Case& c : cases) check_case(c);
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
      // Each tp rank routes its own s/tp tokens under sequence parallelism
      // (predicted 19% high when the plan counted every token per rank).
      // Whole experts on each tp rank: the plan's search does not split them
      // over tp (--expert-tensor-parallel-size, whose default is the tp size).
      {"moe tp2 sp", 2,
       "--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 256 --moe-shared-expert-intermediate-size 128 "
       "--tensor-model-parallel-size 2 --sequence-parallel",
       "--pipeline-model-parallel-size 1 --no-distributed-optimizer", "--expert-tensor-parallel-size 1"},
      {"moe cp2", 2,
       "--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 256 --moe-shared-expert-intermediate-size 128 "
       "--context-parallel-size 2",
       "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --no-distributed-optimizer"},
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

// The same at --bf16: tripod keeps the whole f32 values next to the bf16
// compute copy (10 + 16/D bytes a parameter under optim, 6 + 16/D under
// optim_grads), and the CPU backend widens each op's bf16 operands to f32
// copies, the loss head's logits and dlogits the largest
// (plan::cpu_half_scratch_bytes; predicted 11% to 35% low without them).
TEST(PlanCpuMemory, ShardingStrategiesBf16Within10Percent) {
  const char* strategies[] = {"no_shard", "optim", "optim_grads", "optim_grads_params"};
  for (const char* s : strategies) {
    SCOPED_TRACE(s);
    const std::string layout = std::string("--data-parallel-sharding-strategy ") + s;
    const std::string tp = "--tensor-model-parallel-size 2 --sequence-parallel " + layout;
    const char* pin = "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1";
    check_case({"dp2 bf16", 2, layout.c_str(), pin, "", true});
    check_case({"dp4 bf16", 4, layout.c_str(), pin, "", true});
    check_case({"tp2 dp2 sp bf16", 4, tp.c_str(), "--pipeline-model-parallel-size 1", "", true});
  }
}

// Expert parallelism: each rank stores E / ep experts (their optimizer
// state sharded over edp under the distributed optimizer). The plan's
// search does not pin --expert-model-parallel-size, so the plan's memory
// model is asked directly (plan::estimate_memory with `tripod plan
// --device cpu`'s options), for the model the flags build: first at dp 2
// without ep, where `tripod plan` must give the same bytes, then at ep 2.
TEST(PlanCpuMemory, MoeExpertParallelWithin10Percent) {
  using namespace tripod;
  config::GptConfig m;
  m.num_layers = 4, m.hidden_size = 128, m.num_attention_heads = 4, m.seq_length = 128, m.vocab_size = 2000;
  m.moe.num_experts = 4, m.moe.router_topk = 2, m.moe.ffn_hidden_size = 256;
  m.moe.shared_expert_intermediate_size = 128;
  m.finalize();
  plan::MemoryOptions o;
  o.cuda = false;
  o.workspace_fixed_gib = 0;
  auto predict = [&](int world, int ep, bool distopt) {
    plan::Layout l(config::Layout::make(world, 1, 1).with_expert_parallel(ep));
    l.micro_batch = 2, l.global_batch = 8, l.dtype = DType::F32, l.distributed_optimizer = distopt;
    return plan::estimate_memory(m, l, o).allocator_peak() / double(1 << 20);
  };
  const char* moe = "--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 256 --moe-shared-expert-intermediate-size 128";
  const std::string dp2 = moe, ep2 = std::string(moe) + " --expert-model-parallel-size 2",
                    ep2_dp4 = ep2 + " --use-distributed-optimizer";
  const Case same{"moe dp2", 2, dp2.c_str(), "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 "
                                             "--no-distributed-optimizer"};
  EXPECT_NEAR(predict(2, 1, false), plan_peak_mib(same), 1e-6) << "the hand-built model is not the flags' model";
  const struct {
    Case c;
    double predicted;
  } cases[] = {{{"moe ep2", 2, ep2.c_str(), ""}, predict(2, 2, false)},
               {{"moe ep2 dp4 distributed optimizer", 4, ep2_dp4.c_str(), ""}, predict(4, 2, true)}};
  for (const auto& [c, predicted] : cases) {
    SCOPED_TRACE(c.name);
    const double measured = measured_peak_mib(c);
    EXPECT_NEAR(predicted / measured, 1.0, 0.10) << "predicted " << predicted << " MiB, measured " << measured << " MiB";
    std::printf("%s: predicted %.2f MiB, measured %.2f MiB\n", c.name, predicted, measured);
  }
}

}  // namespace
