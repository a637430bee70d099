// The experts' rank generator (config/layout.h, NOTE [Expert rank order]):
// Megatron's "tp-ep-dp-pp" over [etp, ep, edp, pp], checked against the
// worked examples of the NOTE (written out by hand from the order), the
// coordinates against the groups for many shapes, and the validation
// messages.
#include <gtest/gtest.h>

#include <set>

#include "base/error.h"
#include "config/layout.h"

using tripod::config::Layout;
using tripod::config::RankGroups;

namespace {

Layout expert_layout(int world, int tp, int pp, int cp, int ep) {
  return Layout::make(world, tp, pp, 1, cp).with_expert_parallel(ep);
}

std::string expert_error(int world, int tp, int pp, int cp, int ep, int etp = 1) {
  try {
    Layout::make(world, tp, pp, 1, cp).with_expert_parallel(ep, etp);
  } catch (const tripod::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ExpertLayout, Pp2Ep2OnEightRanks) {
  const Layout l = expert_layout(8, 1, 2, 1, 2);
  EXPECT_EQ(l.edp(), 2);
  EXPECT_EQ(l.ep_groups(), (RankGroups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(l.expert_dp_groups(), (RankGroups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
}

// tp 2, ep 2 on 4 ranks: ep folds onto the dense tp groups, edp is dp (2).
TEST(ExpertLayout, Ep2FoldsOntoTp2) {
  const Layout l = expert_layout(4, 2, 1, 1, 2);
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(l.edp(), 2);
  EXPECT_EQ(l.ep_groups(), l.tp_groups());
  EXPECT_EQ(l.ep_groups(), (RankGroups{{0, 1}, {2, 3}}));
  EXPECT_EQ(l.expert_dp_groups(), l.dp_groups());
  EXPECT_EQ(l.expert_dp_groups(), (RankGroups{{0, 2}, {1, 3}}));
  for (int g = 0; g < 4; ++g) EXPECT_EQ(l.ep_rank(g), l.tp_rank(g)) << g;
}

// tp 2, etp 2, ep 2 on 8 ranks (dp 4, edp 2): the expert-tp groups are the
// dense tp groups, ep strides by etp over dp, edp by etp x ep.
TEST(ExpertLayout, Etp2Ep2Tp2OnEightRanks) {
  const Layout l = Layout::make(8, 2, 1).with_expert_parallel(2, 2);
  EXPECT_EQ(l.edp(), 2);
  EXPECT_EQ(tripod::config::masked_rank_groups(tripod::config::kExpertRankOrder, {l.etp, l.ep, l.edp(), l.pp}, "tp"), l.tp_groups());
  EXPECT_EQ(l.ep_groups(), (RankGroups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(l.expert_dp_groups(), (RankGroups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  for (int g = 0; g < 8; ++g) EXPECT_EQ(l.ep_rank(g), (g / 2) % 2) << g;
}

// tp 2 without ep: each expert's replicas are the tp and dp ranks together.
TEST(ExpertLayout, Ep1Tp2ReplicatesOverTpAndDp) {
  const Layout l = expert_layout(4, 2, 1, 1, 1);
  EXPECT_EQ(l.edp(), 4);
  EXPECT_EQ(l.ep_groups(), (RankGroups{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(l.expert_dp_groups(), (RankGroups{{0, 1, 2, 3}}));
}

// tp 2 x cp 2 x dp 2 with ep 2: ep on tp, edp over cp and dp.
TEST(ExpertLayout, Tp2Cp2Ep2OnEightRanks) {
  const Layout l = expert_layout(8, 2, 1, 2, 2);
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(l.edp(), 4);
  EXPECT_EQ(l.ep_groups(), (RankGroups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(l.expert_dp_groups(), (RankGroups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
}

// cp 2 x dp 2 with ep 4: one ep group over cp and dp.
TEST(ExpertLayout, Cp2Ep4SpansCpAndDp) {
  const Layout l = expert_layout(4, 1, 1, 2, 4);
  EXPECT_EQ(l.cp_groups(), (RankGroups{{0, 1}, {2, 3}}));
  EXPECT_EQ(l.ep_groups(), (RankGroups{{0, 1, 2, 3}}));
  EXPECT_EQ(l.expert_dp_groups(), (RankGroups{{0}, {1}, {2}, {3}}));
  for (int g = 0; g < 4; ++g) EXPECT_EQ(l.ep_rank(g), g);
}

// For every valid (world, tp, cp, pp, ep): ep_rank(g) is g's place in its
// ep group, the ep and edp groups each partition the world, an ep group
// and an edp group meet in exactly one rank, and every group lies in one
// pipeline stage.
TEST(ExpertLayout, CoordinatesMatchGroupsForManyShapes) {
  int checked = 0;
  for (int world : {1, 2, 4, 6, 8, 12, 16})
    for (int tp : {1, 2, 3, 4})
      for (int cp : {1, 2})
        for (int pp : {1, 2})
          for (int ep : {1, 2, 3, 4, 8}) {
            if (world % (tp * cp * pp) != 0 || world % (ep * pp) != 0) continue;
            const Layout l = expert_layout(world, tp, pp, cp, ep);
            const RankGroups eps = l.ep_groups(), edps = l.expert_dp_groups();
            ASSERT_EQ(static_cast<int>(eps.size()), world / ep);
            ASSERT_EQ(static_cast<int>(edps.size()), world / l.edp());
            std::set<int> seen_ep, seen_edp;
            for (const auto& g : eps) {
              ASSERT_EQ(static_cast<int>(g.size()), ep);
              for (size_t i = 0; i < g.size(); ++i) {
                EXPECT_EQ(l.ep_rank(g[i]), static_cast<int>(i)) << world << " " << tp << " " << ep;
                EXPECT_EQ(l.pp_rank(g[i]), l.pp_rank(g[0]));
                seen_ep.insert(g[i]);
              }
            }
            for (const auto& g : edps) {
              ASSERT_EQ(static_cast<int>(g.size()), l.edp());
              for (int r : g) {
                EXPECT_EQ(l.ep_rank(r), l.ep_rank(g[0]));  // the replicas of one set of experts
                EXPECT_EQ(l.pp_rank(r), l.pp_rank(g[0]));
                seen_edp.insert(r);
              }
            }
            EXPECT_EQ(static_cast<int>(seen_ep.size()), world);
            EXPECT_EQ(static_cast<int>(seen_edp.size()), world);
            for (const auto& a : eps)
              for (const auto& b : edps) {
                if (l.pp_rank(a[0]) != l.pp_rank(b[0])) continue;
                int common = 0;
                for (int r : a)
                  for (int s : b) common += r == s;
                EXPECT_EQ(common, 1);
              }
            ++checked;
          }
  EXPECT_GT(checked, 40);
}

// At tp 1 and cp 1 the ep rank is the dp rank mod ep, as before the generator.
TEST(ExpertLayout, Tp1KeepsTheDataParallelCarving) {
  const Layout l = expert_layout(8, 1, 2, 1, 2);
  for (int g = 0; g < 8; ++g) EXPECT_EQ(l.ep_rank(g), l.dp_rank(g) % 2);
}

TEST(ExpertLayout, ValidationNamesTheFlags) {
  std::string e = expert_error(6, 1, 1, 1, 4);
  EXPECT_NE(e.find("world size 6"), std::string::npos) << e;
  EXPECT_NE(e.find("--expert-model-parallel-size 4"), std::string::npos) << e;
  EXPECT_NE(e.find("--pipeline-model-parallel-size 1"), std::string::npos) << e;
  e = expert_error(8, 2, 2, 1, 8);  // 8 x 2 > 8
  EXPECT_NE(e.find("--expert-model-parallel-size 8"), std::string::npos) << e;
  e = expert_error(4, 1, 1, 1, 1, 2);  // etp other than 1 or tp
  EXPECT_NE(e.find("--expert-tensor-parallel-size 2"), std::string::npos) << e;
  EXPECT_NE(e.find("not in this version"), std::string::npos) << e;
  EXPECT_EQ(expert_error(4, 2, 1, 1, 1, 2), "");  // etp = tp
  e = expert_error(2, 2, 1, 1, 2, 2);  // ep 2 on tp needs whole experts
  EXPECT_NE(e.find("--expert-tensor-parallel-size 1"), std::string::npos) << e;
  EXPECT_NE(expert_error(4, 1, 1, 1, 0).find("--expert-model-parallel-size must be >= 1"), std::string::npos);
  EXPECT_EQ(expert_error(4, 2, 1, 1, 4), "");  // ep over tp x dp
  EXPECT_EQ(expert_error(4, 2, 1, 2, 2), "");  // tp x cp, ep on tp
}
