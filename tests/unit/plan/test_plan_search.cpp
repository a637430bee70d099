// Layout search of tripod plan: the rules (an invalid layout is never
// listed, TP never spans nodes by default), best first by predicted step
// time with plain DP first for a small model that fits one GPU, TP/PP for a
// 13B-class model on 8 x 80 GB.
#include <gtest/gtest.h>

#include <algorithm>

#include "plan/search.h"
#include "unit/plan/plan_models.h"

namespace tripod::plan {
namespace {

GptConfig gpt_13b() { return gpt_model(40, 5120, 40, 2048); }

bool has_note(const PlanResult& r, const std::string& text) {
  for (const auto& n : r.notes)
    if (n.find(text) != std::string::npos) return true;
  return false;
}

// The rules, written out again independently of layout_rule_violation().
void expect_obeys_rules(const GptConfig& m, const Machine& mc, const Layout& l) {
  SCOPED_TRACE(l.str());
  EXPECT_EQ(l.tp * l.pp * l.dp, mc.world());
  EXPECT_LE(l.tp, mc.gpus_per_node);
  EXPECT_EQ(mc.gpus_per_node % l.tp, 0);
  EXPECT_EQ(m.num_attention_heads % l.tp, 0);
  EXPECT_EQ(m.num_layers % (l.pp * l.vpp), 0);
  EXPECT_EQ(l.global_batch % (l.micro_batch * l.dp), 0);
  if (l.vpp > 1) EXPECT_EQ(l.num_microbatches() % l.pp, 0);
}

TEST(PlanSearch, SmallModelPlainDpFirst) {
  const GptConfig m = gpt2_124m();
  Machine mc;   // 1 x 8 x 80 GiB
  SearchOptions o;
  o.global_batch = 256;
  const PlanResult r = plan_layouts(m, mc, o);
  ASSERT_FALSE(r.fits.empty());
  EXPECT_TRUE(r.plain_dp_fits);
  EXPECT_EQ(r.fits[0].layout.tp, 1);
  EXPECT_EQ(r.fits[0].layout.pp, 1);
  EXPECT_EQ(r.fits[0].layout.dp, 8);
  EXPECT_NE(r.fits[0].reasons[0].find("plain DP"), std::string::npos);
  EXPECT_TRUE(has_note(r, "the model fits one GPU: plain DP is predicted fastest (row 1)"));
  // Best first: no row is predicted faster than one above it by more than
  // the 1% within which times count as equal.
  for (size_t i = 1; i < r.fits.size(); ++i)
    EXPECT_GE(r.fits[i].time.total() * 1.01, r.fits[i - 1].time.total()) << r.fits[i].layout.str();
  for (const auto& c : r.fits) {
    expect_obeys_rules(m, mc, c.layout);
    EXPECT_TRUE(c.fits);
    EXPECT_LE(c.mem.total(), 80.0 * (1 << 30));
  }
}

TEST(PlanSearch, Model13bOn8x80NeedsModelParallel) {
  const GptConfig m = gpt_13b();  // ~12.9 B params: 18 B/param = 232 GB, 7.5 = 97 GB
  Machine mc;
  SearchOptions o;
  o.global_batch = 512;
  // ZeRO-3 shards everything at rest (2 B/param at dp 8, and no start-up
  // or checkpoint holds the whole parameters): plain dp 8 fits with it.
  PlanResult z = plan_layouts(m, mc, o);
  EXPECT_TRUE(z.plain_dp_fits);
  for (const auto& c : z.fits)
    if (c.layout.tp * c.layout.pp == 1) EXPECT_EQ(c.layout.zero_stage, 3) << c.layout.str();
  // Without it (the distributed optimizer, ZeRO-1) it needs model parallelism.
  o.distributed_optimizer = Choice::kOn;
  const PlanResult r = plan_layouts(m, mc, o);
  ASSERT_GE(r.fits.size(), 3u);
  EXPECT_FALSE(r.plain_dp_fits);
  for (size_t i = 0; i < r.fits.size(); ++i) {
    EXPECT_GT(r.fits[i].layout.tp * r.fits[i].layout.pp, 1) << r.fits[i].layout.str();
    expect_obeys_rules(m, mc, r.fits[i].layout);
  }
  // Best first: no layout is more than 1% faster than the one above it (times
  // within 1% count as equal and are ordered by simplicity, then memory).
  for (size_t i = 1; i < r.fits.size(); ++i)
    EXPECT_LE(r.fits[i - 1].time.total(), r.fits[i].time.total() * 1.01);
}

TEST(PlanSearch, TpNeverSpansNodesByDefault) {
  const GptConfig m = gpt_13b();
  Machine mc;
  mc.nnodes = 4, mc.gpus_per_node = 4, mc.gpu_memory_gb = 40;
  SearchOptions o;
  o.global_batch = 256;
  PlanResult r = plan_layouts(m, mc, o);
  ASSERT_FALSE(r.fits.empty());
  int max_tp = 0;
  for (const auto& c : r.fits) {
    expect_obeys_rules(m, mc, c.layout);
    EXPECT_FALSE(c.time.tp_crosses_nodes);
    max_tp = std::max(max_tp, c.layout.tp);
  }
  EXPECT_LE(max_tp, 4);
  o.allow_tp_across_nodes = true;
  r = plan_layouts(m, mc, o);
  bool any_cross = false;
  for (const auto& c : r.fits) any_cross |= c.layout.tp > 4;
  EXPECT_TRUE(any_cross);
}

TEST(PlanSearch, RuleViolationsNamed) {
  const GptConfig m = gpt_13b();  // 40 heads, 40 layers
  Machine mc;                     // 8 GPUs
  // A layout with the ranks of `world` GPUs, micro 1, global 8.
  auto at = [](int world, int tp, int pp = 1) {
    Layout l = layout(world, tp, pp);
    l.micro_batch = 1, l.global_batch = 8;
    return l;
  };
  Layout l = at(8, 8);
  EXPECT_EQ(layout_rule_violation(m, mc, l, false), "");
  l = at(3, 3);  // 3 x 1 x 1 != 8
  EXPECT_NE(layout_rule_violation(m, mc, l, false).find("!= 8 GPUs"), std::string::npos);
  const GptConfig m12 = gpt_model(40, 12 * 432, 12, 2048);
  l = at(8, 8);
  EXPECT_NE(layout_rule_violation(m12, mc, l, false).find("heads 12 % TP 8"), std::string::npos);
  l = at(8, 1, 8);
  l.vpp = 1;  // 40 % 8 == 0 fine; vpp 2: 40 % 16 != 0
  EXPECT_EQ(layout_rule_violation(m, mc, l, false), "");
  l.vpp = 2;
  EXPECT_NE(layout_rule_violation(m, mc, l, false).find("layers 40"), std::string::npos);
  l = at(8, 1);
  l.micro_batch = 3, l.global_batch = 64;
  EXPECT_NE(layout_rule_violation(m, mc, l, false).find("global batch 64"), std::string::npos);
  Machine two;
  two.nnodes = 2, two.gpus_per_node = 8;
  l = at(16, 16);
  l.global_batch = 64;
  EXPECT_NE(layout_rule_violation(m, two, l, false).find("cross nodes"),
            std::string::npos);
}

TEST(PlanSearch, NothingFitsSaysWhy) {
  const GptConfig m = gpt_13b();
  Machine mc;
  mc.gpus_per_node = 1, mc.gpu_memory_gb = 24;
  SearchOptions o;
  o.global_batch = 8;
  const PlanResult r = plan_layouts(m, mc, o);
  EXPECT_TRUE(r.fits.empty());
  ASSERT_TRUE(r.smallest.has_value());
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes.back().find("no layout fits"), std::string::npos);
}


// A sequence too long for any CP 1 layout: the search goes on to CP 2, 4, ...
// and lists the smallest CP that fits, with --context-parallel-size in its flags.
TEST(PlanSearch, LongSequenceFallsBackToContextParallel) {
  // 512K tokens: TP 8 with SP inside a node still needs 85 GiB; CP 2 across the two nodes halves it.
  const GptConfig m = gpt_model(16, 2048, 16, 524288);
  Machine mc;
  mc.nnodes = 2, mc.gpus_per_node = 8, mc.gpu_memory_gb = 80;
  SearchOptions o;
  o.global_batch = 8;
  o.recompute = {Recompute::None};
  const PlanResult r = plan_layouts(m, mc, o);
  ASSERT_FALSE(r.fits.empty());
  const int cp = r.fits.front().layout.cp;
  EXPECT_GT(cp, 1);
  for (const auto& c : r.fits) {
    EXPECT_EQ(c.layout.cp, cp);
    EXPECT_EQ(c.layout.tp * c.layout.cp * c.layout.pp * c.layout.dp, 16);
  }
  EXPECT_NE(r.notes.front().find("no layout fits without context parallelism"), std::string::npos) << r.notes.front();
  EXPECT_NE(megatron_flags(m, r.fits.front().layout).find("--context-parallel-size " + std::to_string(cp)),
            std::string::npos);
  // Pinned at 1: no fallback.
  o.cp = 1;
  EXPECT_TRUE(plan_layouts(m, mc, o).fits.empty());
}

// --cp-comm-type a2a: only layouts whose heads per TP rank CP divides, and
// the printed flags name the exchange.
TEST(PlanSearch, AllToAllKeepsLayoutsWhoseHeadsCpDivides) {
  const GptConfig m = gpt_model(16, 2048, 8, 524288);  // 8 heads
  Machine mc;
  mc.nnodes = 2, mc.gpus_per_node = 8, mc.gpu_memory_gb = 80;
  SearchOptions o;
  o.global_batch = 8;
  o.recompute = {Recompute::None};
  o.cp = 4, o.cp_comm = config::CpCommType::A2a;
  const PlanResult r = plan_layouts(m, mc, o);
  ASSERT_FALSE(r.fits.empty());
  for (const auto& c : r.fits) {
    EXPECT_EQ(c.layout.cp_comm, config::CpCommType::A2a);
    EXPECT_LE(c.layout.tp, 2) << c.layout.str();  // 8 heads / TP over CP 4
  }
  EXPECT_NE(megatron_flags(m, r.fits.front().layout).find("--context-parallel-size 4 --cp-comm-type a2a"),
            std::string::npos);
  Layout tp4{config::Layout::make(16, 4, 1, 1, 4)};  // 2 heads per TP rank
  tp4.cp_comm = config::CpCommType::A2a, tp4.global_batch = 8;
  EXPECT_NE(layout_rule_violation(m, mc, tp4, false).find("--cp-comm-type a2a"), std::string::npos)
      << layout_rule_violation(m, mc, tp4, false);
  tp4.cp_comm = config::CpCommType::P2p;  // the ring takes any head count
  EXPECT_EQ(layout_rule_violation(m, mc, tp4, false).find("--cp-comm-type"), std::string::npos);
}

TEST(PlanSearch, TpPinnedAboveANodeNamesTheRule) {
  // 345M-class, 16 heads: only the node rule stands in the way of TP 16
  const GptConfig m = gpt_model(24, 1024, 16);
  Machine mc;
  mc.nnodes = 2, mc.gpus_per_node = 8, mc.gpu_memory_gb = 40;
  SearchOptions o;
  o.tp = 16;
  const PlanResult r = plan_layouts(m, mc, o);
  EXPECT_EQ(r.valid_layouts, 0);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes.back().find("TP 16 does not divide the 8 GPUs of a node"), std::string::npos) << r.notes.back();
  EXPECT_NE(r.notes.back().find("--allow-tp-across-nodes"), std::string::npos) << r.notes.back();
}

TEST(PlanSearch, PinnedTpOrPpDoesNotDenyThatPlainDpFits) {
  const GptConfig m = gpt_model(24, 1024, 16);  // GPT-2 345M: 24 layers, 1024 hidden, 16 heads
  Machine mc;
  mc.gpus_per_node = 8, mc.gpu_memory_gb = 40;
  SearchOptions o;
  o.global_batch = 64;
  ASSERT_TRUE(plan_layouts(m, mc, o).plain_dp_fits);  // unpinned: plain DP fits and comes first
  for (auto [tp, pp] : {std::pair{2, 0}, std::pair{0, 2}, std::pair{2, 2}}) {
    o.tp = tp, o.pp = pp;
    const PlanResult r = plan_layouts(m, mc, o);
    SCOPED_TRACE(::testing::Message() << "tp " << tp << " pp " << pp);
    ASSERT_FALSE(r.fits.empty());
    EXPECT_FALSE(has_note(r, "does not fit one GPU"));
    EXPECT_TRUE(has_note(r, "also fits one GPU with plain DP (tp1 pp1 dp8"));
  }
  // A 13B model pinned to TP 2 on 8 x 80 GiB: plain DP really does not fit
  // (with the distributed optimizer; ZeRO-3 would fit it).
  Machine big;
  big.gpu_memory_gb = 80;
  o.tp = 2, o.pp = 0, o.global_batch = 256;
  o.distributed_optimizer = Choice::kOn;
  const PlanResult r = plan_layouts(gpt_13b(), big, o);
  ASSERT_FALSE(r.fits.empty());
  EXPECT_TRUE(has_note(r, "TP 2 pinned; the model does not fit one GPU with plain DP either"));
}

// The sharding strategy is searched (docs/zero.md): plain dp 8, one
// micro-batch a rank, a 1.3B model in bf16. With room for everything,
// optim is the fastest (its bf16 all-gather moves less than no_shard's fp32
// all-reduce; ZeRO-2 the same bytes plus a latency per layer, ZeRO-3 also
// the parameter all-gathers: slower). With room between ZeRO-3's peak and
// every other strategy's, only ZeRO-3 is listed, and its flags say so.
TEST(PlanSearch, ShardingStrategyIsSearched) {
  const GptConfig m = gpt_model(24, 2048, 16);
  Machine mc;  // 1 x 8
  SearchOptions o;
  o.global_batch = 8, o.micro_batch = 1, o.tp = 1, o.pp = 1;
  o.recompute = {Recompute::None};
  mc.gpu_memory_gb = 1000;
  const PlanResult all = plan_layouts(m, mc, o);
  ASSERT_EQ(all.fits.size(), 4u);  // one layout, four strategies
  const Candidate& best = all.fits.front();
  EXPECT_TRUE(best.layout.distributed_optimizer);
  EXPECT_EQ(best.layout.zero_stage, 0) << best.layout.str();
  EXPECT_NE(megatron_flags(m, best.layout).find("--use-distributed-optimizer"), std::string::npos);
  EXPECT_EQ(megatron_flags(m, best.layout).find("--data-parallel-sharding-strategy"), std::string::npos);
  double mem[4] = {0, 0, 0, 0}, time[4] = {0, 0, 0, 0};
  for (const auto& c : all.fits) {
    const int s = c.layout.zero_stage ? c.layout.zero_stage : c.layout.distributed_optimizer ? 1 : 0;
    mem[s] = c.mem.total(), time[s] = c.time.total();
  }
  for (int s : {0, 2, 3}) EXPECT_GT(time[s], time[1]) << s;
  // ZeRO-3's extra time over ZeRO-2 (the same reduce-scatters): its two
  // all-gathers of the bf16 parameters (zero3_param_gather_seconds) less
  // ZeRO-2's one after the step, 7/8 P 2 bytes over the node's bandwidth.
  const Candidate& z3 = *std::find_if(all.fits.begin(), all.fits.end(),
                                      [](const Candidate& c) { return c.layout.zero_stage == 3; });
  const double P = double(params_on_stage(m, 1, 1, 0));
  EXPECT_DOUBLE_EQ(z3.time.dp_param_gather, 2 * (7.0 / 8 * P * 2 / (mc.intra_node_bw_gbs * 1e9) +
                                                  24 * mc.intra_node_latency_us * 1e-6));
  EXPECT_NEAR(time[3] - time[2], z3.time.dp_param_gather - 7.0 / 8 * P * 2 / (mc.intra_node_bw_gbs * 1e9), 1e-9);
  // Memory: each stronger strategy needs less, ZeRO-3 the least.
  EXPECT_LT(mem[3], mem[2]);
  EXPECT_LT(mem[2], mem[1]);
  EXPECT_LT(mem[1], mem[0]);
  // Room for ZeRO-3 only.
  mc.gpu_memory_gb = (mem[3] + mem[2]) / 2 / double(1ll << 30);
  const PlanResult tight = plan_layouts(m, mc, o);
  ASSERT_EQ(tight.fits.size(), 1u);
  EXPECT_EQ(tight.fits.front().layout.zero_stage, 3);
  EXPECT_NE(megatron_flags(m, tight.fits.front().layout)
                .find("--data-parallel-sharding-strategy optim_grads_params --use-distributed-optimizer"),
            std::string::npos)
      << megatron_flags(m, tight.fits.front().layout);
  // Pinned by the flags: one strategy only.
  o.distributed_optimizer = Choice::kOn;
  mc.gpu_memory_gb = 1000;
  EXPECT_EQ(plan_layouts(m, mc, o).fits.size(), 1u);
}

}  // namespace
}  // namespace tripod::plan
