// The planner and expert parallelism (docs/plan.md, "MoE"): the token
// all-to-all time against a hand count, the E/ep experts a rank holds, and
// a search that splits the experts because one rank cannot hold them all.
#include <gtest/gtest.h>

#include <algorithm>

#include <fmt/format.h>

#include "unit/plan/plan_models.h"
#include "plan/search.h"
#include "plan/time_model.h"

namespace tripod::plan {
namespace {

// 4 MoE layers (GELU experts, biases): C 1024, 8 heads, seq 2048, vocab
// 32000, 8 experts of Fe 2816, top-2.
GptConfig moe_model(int64_t experts = 8, int64_t fe = 2816) {
  GptConfig m;
  m.num_layers = 4, m.hidden_size = 1024, m.num_attention_heads = 8, m.seq_length = 2048, m.vocab_size = 32000;
  m.moe.num_experts = experts, m.moe.router_topk = 2, m.moe.ffn_hidden_size = fe;
  m.finalize();
  return m;
}

Layout ep_layout(int world, int ep, int64_t micro, int64_t global) {
  Layout l{config::Layout::make(world, 1, 1).with_expert_parallel(ep)};
  l.micro_batch = micro, l.global_batch = global, l.dtype = DType::BF16;
  return l;
}

// Per MoE layer and micro-batch 4 exchanges (dispatch, combine, and their
// gradients) of N k C p bytes, (ep-1)/ep of which leave the rank:
//   N k C p = 2048 x 2 x 1024 x 2 = 8,388,608 B; at ep 4 inside a node
//   (300 GB/s, 10 us): 3/4 x 8,388,608 / 300e9 + 10e-6 = 30.97152 us;
//   x 4 layers x 4 exchanges x 2 micro-batches (global 16 / dp 8) = 0.99108864 ms.
// Across nodes (4 GPUs a node, ep 8: 40 GB/s, 25 us):
//   7/8 x 8,388,608 / 40e9 + 25e-6 = 208.50048 us, x 32 = 6.67201536 ms.
// Full recompute dispatches and combines again: 6 exchanges.
TEST(PlanMoe, AllToAllTimeByHand) {
  const GptConfig m = moe_model();
  Machine mc;  // 8 GPUs a node, 300 / 40 GB/s, 10 / 25 us
  Layout l = ep_layout(8, 4, 1, 16);
  EXPECT_NEAR(moe_all_to_all_seconds(m, l, mc), 0.99108864e-3, 1e-12);
  const TimeBreakdown t = estimate_time(m, l, mc);
  EXPECT_DOUBLE_EQ(t.ep_comm, moe_all_to_all_seconds(m, l, mc));
  EXPECT_FALSE(t.ep_crosses_nodes);
  l.recompute = Recompute::Full;
  EXPECT_NEAR(moe_all_to_all_seconds(m, l, mc), 0.99108864e-3 * 6 / 4, 1e-12);
  mc.nnodes = 2, mc.gpus_per_node = 4;
  Layout x = ep_layout(8, 8, 1, 16);
  EXPECT_NEAR(moe_all_to_all_seconds(m, x, mc), 32 * (7.0 / 8 * 8388608 / 40e9 + 25e-6), 1e-12);
  EXPECT_TRUE(estimate_time(m, x, mc).ep_crosses_nodes);
  EXPECT_EQ(moe_all_to_all_seconds(m, ep_layout(8, 1, 1, 16), mc), 0.0);
  EXPECT_EQ(estimate_time(gpt_model(4, 1024, 8, 2048, 32000), ep_layout(8, 1, 1, 16), mc).ep_comm, 0.0);
}

// One expert: fc1 C x Fe + Fe, fc2 Fe x C + C = 2 x 1024 x 2816 + 2816 + 1024
// = 5,771,008; 8 experts x 4 layers = 184,672,256 routed-expert parameters
// on the one stage. At ep 4 a rank holds 2 of 8: 46,168,064, so its
// parameters are params_on_stage - 184,672,256 + 46,168,064, and the
// data-parallel gradient reduction moves that many.
TEST(PlanMoe, ExpertsPerRankByHand) {
  const GptConfig m = moe_model();
  EXPECT_EQ(expert_params_on_stage(m, 1, 1, 0), 184672256);
  const int64_t all = params_on_stage(m, 1, 1, 0);
  EXPECT_EQ(rank_params_on_stage(m, ep_layout(8, 1, 1, 16), 0), all);
  EXPECT_EQ(rank_params_on_stage(m, ep_layout(8, 4, 1, 16), 0), all - 184672256 + 46168064);
  // Megatron's memory model: E/ep experts per rank, their optimizer state
  // over the expert-data-parallel ranks (dp / ep = 2): bf16, distributed
  // optimizer, dense params at 6 + 12/8 = 7.5 B, experts at 6 + 12/2 = 12 B.
  Layout l = ep_layout(8, 4, 1, 16);
  l.distributed_optimizer = true;
  MemoryOptions o;
  o.model = MemoryModelKind::kMegatron;
  const MemoryBreakdown mb = estimate_memory(m, l, o);
  EXPECT_EQ(mb.params_per_gpu, all - 184672256 + 46168064);
  EXPECT_DOUBLE_EQ(mb.model_states, double(all - 184672256) * 7.5 + 46168064.0 * 12.0);
}

// 32 experts of Fe 4096: 32 x 4 x (2 x 1024 x 4096 + 4096 + 1024) =
// 1,074,397,184 routed-expert parameters, 18 B each replicated (18.0 GiB),
// which with the rest does not fit a 20 GiB GPU at ep 1; at ep 2 a rank
// keeps 16 of them (9.0 GiB). The search splits the experts and prints the
// flag. With room for every expert ep 1 layouts fit too, and the ranking
// weighs the all-to-alls against the smaller gradient reduction (a rank
// reduces its E/ep experts' gradients only).
TEST(PlanMoe, SearchSplitsTheExpertsWhenOneRankCannotHoldThem) {
  const GptConfig m = moe_model(32, 4096);
  Machine mc;  // one node of 8
  mc.gpu_memory_gb = 20;
  SearchOptions o;
  o.global_batch = 16, o.tp = 1, o.pp = 1;
  o.distributed_optimizer = Choice::kOff;
  o.memory.model = MemoryModelKind::kMegatron;
  o.recompute = {Recompute::Selective};
  PlanResult r = plan_layouts(m, mc, o);
  ASSERT_FALSE(r.fits.empty());
  for (const Candidate& c : r.fits) EXPECT_GT(c.layout.ep, 1) << c.layout.str();
  const Candidate& best = r.fits.front();
  EXPECT_NE(megatron_flags(m, best.layout).find(fmt::format("--expert-model-parallel-size {}", best.layout.ep)),
            std::string::npos);
  EXPECT_GT(best.time.ep_comm, 0.0);
  // ep 1 alone does not fit.
  o.ep = 1;
  EXPECT_TRUE(plan_layouts(m, mc, o).fits.empty());
  // With room for every expert, ep 1 fits as well; row 1 is the fastest.
  mc.gpu_memory_gb = 141;
  o.ep = 0;
  r = plan_layouts(m, mc, o);
  ASSERT_FALSE(r.fits.empty());
  EXPECT_TRUE(std::any_of(r.fits.begin(), r.fits.end(), [](const Candidate& c) { return c.layout.ep == 1; }));
  for (const Candidate& c : r.fits) EXPECT_LE(r.fits.front().time.total(), c.time.total() * 1.01);
}

}  // namespace
}  // namespace tripod::plan
