// Layout search of tripod plan: the rules (an invalid layout is never
// listed, TP never spans nodes by default), best first by predicted step
// time with plain DP first for a small model that fits one GPU, TP/PP for a
// 13B-class model on 8 x 80 GB.
#include <gtest/gtest.h>

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
  // A 13B model pinned to TP 2 on 8 x 80 GiB: plain DP really does not fit.
  Machine big;
  big.gpu_memory_gb = 80;
  o.tp = 2, o.pp = 0, o.global_batch = 256;
  const PlanResult r = plan_layouts(gpt_13b(), big, o);
  ASSERT_FALSE(r.fits.empty());
  EXPECT_TRUE(has_note(r, "TP 2 pinned; the model does not fit one GPU with plain DP either"));
}

}  // namespace
}  // namespace tripod::plan
