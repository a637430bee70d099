// plan/oom_advice.h without the binary: doctor's fit check and the advice
// after an out-of-memory error, for a job given as the plan sees it (a
// finalized model and the layout of its GPUs). tests/cli/test_oom_advice.cpp
// and test_doctor_fit.cpp drive the same code through `tripod`.
#include <gtest/gtest.h>

#include <algorithm>

#include "plan/oom_advice.h"
#include "plan/search.h"
#include "unit/plan/plan_models.h"

namespace tripod::plan {
namespace {

constexpr double kGiB = double(1ull << 30);

Job gpt2_job(int world, int tp = 1, int pp = 1) {
  Job job;
  job.model = gpt2_124m();
  job.layout = layout(world, tp, pp);
  job.layout.micro_batch = 8, job.layout.global_batch = 8 * job.layout.dp;
  job.local_world_size = world;
  return job;
}

TEST(OomAdvice, FitCheckIsThePlansPrediction) {
  const Job job = gpt2_job(8);
  const MemoryFit f = memory_fit_check(job, 80 * kGiB);
  EXPECT_TRUE(f.fits);
  Machine mc;
  mc.gpu_memory_gb = 80;
  EXPECT_DOUBLE_EQ(f.predicted_bytes, evaluate(job.model, mc, job.layout).mem.total());
  EXPECT_NE(f.finding.find("tp1 pp1 dp8 mbs8"), std::string::npos) << f.finding;
  EXPECT_TRUE(f.fix.empty());
  // 4 GiB GPUs: the 124M model's 2.2 GB of model states and its activations do not fit; others are listed.
  const MemoryFit small = memory_fit_check(job, 4 * kGiB);
  EXPECT_FALSE(small.fits);
  EXPECT_NE(small.fix.find("more: tripod plan --num-layers 12 --hidden-size 768"), std::string::npos) << small.fix;
}

TEST(OomAdvice, GpusThatAreNotAMultipleOfTheModelParallelSizes) {
  Job job = gpt2_job(8);
  job.layout.world_size = 6, job.layout.tp = 4, job.layout.dp = 0;  // what the flags ask on 6 GPUs
  const MemoryFit f = memory_fit_check(job, 80 * kGiB);
  EXPECT_FALSE(f.fits);
  EXPECT_NE(f.finding.find("6 GPU(s) are not a multiple of TP 4 x PP 1"), std::string::npos) << f.finding;
}

TEST(OomAdvice, NamesTheRankAndTheLayout) {
  const Job job = gpt2_job(8, 2, 2);
  const OutOfMemoryError e("cudaMalloc failed", "", size_t(1) << 30, size_t(3) << 30, size_t(4) << 30);
  const std::string s = oom_advice(e, job, JobShape{5, 1, 1, 0});
  EXPECT_NE(s.find("rank 5 (tp rank 1, pp rank 1, dp rank 0; layout tp 2 pp 2 dp 2) ran out of memory"),
            std::string::npos) << s;
  EXPECT_NE(s.find("needed 1.00 GiB more, 3.00 GiB already in use, device memory 4.00 GiB"), std::string::npos)
      << s;
  EXPECT_NE(s.find("--bf16 --nnodes 1 --gpus-per-node 8 --gpu-memory-gb 4.0"), std::string::npos) << s;
  // Without the device's capacity there is nothing to plan against.
  const OutOfMemoryError unknown("cudaMalloc failed", "", 1, 1, 0);
  EXPECT_EQ(oom_advice(unknown, job, JobShape{}).find("more:"), std::string::npos);
}

// The layouts the advice lists come from the plan's search, which tries each
// sharding strategy: on GPUs with room only for ZeRO-3 layouts (a capacity
// below every other layout's prediction), every layout listed is ZeRO-3 and
// its flags say so.
TEST(OomAdvice, ListsTheShardingStrategyThatFits) {
  Job job = gpt2_job(8);
  Machine mc;
  mc.gpu_memory_gb = 1000;
  SearchOptions o;
  o.global_batch = job.layout.global_batch;
  const PlanResult all = plan_layouts(job.model, mc, o);
  double others = 1e30, zero3 = 1e30;
  for (const auto& c : all.fits) (c.layout.zero_stage == 3 ? zero3 : others) = std::min(
      c.layout.zero_stage == 3 ? zero3 : others, c.mem.total());
  ASSERT_LT(zero3, others);  // ZeRO-3 holds the least of all
  const double capacity = (zero3 + others) / 2;
  const OutOfMemoryError e("cudaMalloc failed", "", size_t(1) << 30, size_t(1) << 30, size_t(capacity));
  const std::string s = oom_advice(e, job, JobShape{});
  const std::string listed = "layouts predicted to fit 8 GPU(s)";
  ASSERT_NE(s.find(listed), std::string::npos) << s;
  int rows = 0;
  for (size_t at = s.find("\n  ", s.find(listed)); at != std::string::npos; at = s.find("\n  ", at + 1), ++rows) {
    const std::string row = s.substr(at + 1, s.find('\n', at + 1) - at - 1);
    EXPECT_NE(row.find(" zero3 "), std::string::npos) << row;
    EXPECT_NE(row.find("--data-parallel-sharding-strategy optim_grads_params --use-distributed-optimizer"),
              std::string::npos) << row;
  }
  EXPECT_GE(rows, 1) << s;
}

}  // namespace
}  // namespace tripod::plan
