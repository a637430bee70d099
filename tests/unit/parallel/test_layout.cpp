// Layout and rank-order tests against Megatron's worked examples
// (megatron/core/parallel_state.py, initialize_model_parallel docstring),
// plus validation messages and a single-process ProcessGroups.
#include <gtest/gtest.h>

#include <set>

#include "base/error.h"
#include "parallel/groups.h"
#include "parallel/layout.h"

using tripod::parallel::Layout;
using tripod::parallel::RankGroups;

TEST(Layout, Megatron8RanksTp2Pp2) {
  Layout l = Layout::make(8, 2, 2);
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(l.tp_groups(), (RankGroups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(l.dp_groups(), (RankGroups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(l.pp_groups(), (RankGroups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(l.mp_groups(), (RankGroups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(l.embd_groups(), (RankGroups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

// Megatron's docstring: 16 GPUs, tp=2, pp=4 -> 8 tp, 4 pp, 8 dp groups.
TEST(Layout, Megatron16RanksTp2Pp4) {
  Layout l = Layout::make(16, 2, 4);
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(l.dp_groups(), (RankGroups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(l.tp_groups(), (RankGroups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(l.pp_groups(), (RankGroups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(l.embd_groups(), (RankGroups{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
  EXPECT_EQ(l.mp_groups(), (RankGroups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
}

// Every rank's coordinates agree with its position in each group list, and
// tp/dp/pp/mp partition the world, for many shapes.
TEST(Layout, CoordinatesMatchGroupsForManyShapes) {
  for (int world : {1, 2, 4, 6, 8, 12, 16, 24}) {
    for (int tp = 1; tp <= world; ++tp) {
      for (int pp = 1; pp <= world; ++pp) {
        if (world % (tp * pp)) continue;
        Layout l = Layout::make(world, tp, pp);
        for (int g = 0; g < world; ++g)
          EXPECT_EQ(l.global_rank(l.tp_rank(g), l.dp_rank(g), l.pp_rank(g)), g);
        auto check_partition = [&](const RankGroups& groups, int size, auto coord, auto same) {
          std::set<int> seen;
          for (const auto& grp : groups) {
            ASSERT_EQ(int(grp.size()), size);
            for (size_t i = 0; i < grp.size(); ++i) {
              EXPECT_TRUE(seen.insert(grp[i]).second);
              EXPECT_EQ(coord(grp[i]), int(i)) << "world " << world << " tp " << tp << " pp " << pp;
              EXPECT_TRUE(same(grp[i], grp[0]));
            }
          }
          EXPECT_EQ(int(seen.size()), world);
        };
        check_partition(l.tp_groups(), tp, [&](int g) { return l.tp_rank(g); },
                        [&](int a, int b) { return l.dp_rank(a) == l.dp_rank(b) && l.pp_rank(a) == l.pp_rank(b); });
        check_partition(l.dp_groups(), l.dp, [&](int g) { return l.dp_rank(g); },
                        [&](int a, int b) { return l.tp_rank(a) == l.tp_rank(b) && l.pp_rank(a) == l.pp_rank(b); });
        check_partition(l.pp_groups(), pp, [&](int g) { return l.pp_rank(g); },
                        [&](int a, int b) { return l.tp_rank(a) == l.tp_rank(b) && l.dp_rank(a) == l.dp_rank(b); });
        check_partition(l.mp_groups(), tp * pp, [&](int g) { return l.tp_rank(g) + tp * l.pp_rank(g); },
                        [&](int a, int b) { return l.dp_rank(a) == l.dp_rank(b); });
      }
    }
  }
}

// Megatron's "tp-cp-ep-dp-pp" order without ep: cp after tp, gradients over dp x cp.
TEST(Layout, ContextParallel8RanksTp2Cp2Pp2) {
  Layout l = Layout::make(8, 2, 2, 1, 2);
  EXPECT_EQ(l.dp, 1);
  EXPECT_EQ(l.tp_groups(), (RankGroups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(l.cp_groups(), (RankGroups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(l.dp_groups(), (RankGroups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(l.dp_cp_groups(), (RankGroups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(l.pp_groups(), (RankGroups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(l.mp_groups(), (RankGroups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(l.cp_rank(2), 1);
  EXPECT_EQ(l.pp_rank(4), 1);
  EXPECT_EQ(l.str(), "world 8 = tp 2 x cp 2 x dp 1 x pp 2 (vpp 1)");
}

TEST(Layout, ContextParallel8RanksCp2Dp4) {
  Layout l = Layout::make(8, 1, 1, 1, 2);
  EXPECT_EQ(l.dp, 4);
  EXPECT_EQ(l.cp_groups(), (RankGroups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(l.dp_groups(), (RankGroups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(l.dp_cp_groups(), (RankGroups{{0, 1, 2, 3, 4, 5, 6, 7}}));
}

// NOTE [Distributed-optimizer instances] in parallel/groups.h: its worked
// example, and cp inside the instances (dp x cp = 8 ranks cut in 2 runs).
TEST(Layout, DistributedOptimizerInstances) {
  using tripod::parallel::distributed_optimizer_instance_groups;
  const auto g = distributed_optimizer_instance_groups(Layout::make(8, 2, 1), 2);
  EXPECT_EQ(g.intra_dp_cp, (RankGroups{{0, 2}, {4, 6}, {1, 3}, {5, 7}}));
  EXPECT_EQ(g.inter_dist_opt, (RankGroups{{0, 4}, {2, 6}, {1, 5}, {3, 7}}));
  EXPECT_EQ(g.intra_dist_opt, (RankGroups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  const auto c = distributed_optimizer_instance_groups(Layout::make(8, 1, 1, 1, 2), 2);  // cp 2, dp 4
  EXPECT_EQ(c.intra_dp_cp, (RankGroups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(c.inter_dist_opt, (RankGroups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(distributed_optimizer_instance_groups(Layout::make(4, 1, 1), 1).intra_dp_cp, (RankGroups{{0, 1, 2, 3}}));
  try {
    distributed_optimizer_instance_groups(Layout::make(6, 1, 1), 4);
    ADD_FAILURE() << "4 instances of dp 6 accepted";
  } catch (const tripod::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--num-distributed-optimizer-instances 4"), std::string::npos) << e.what();
  }
}

// At cp 1 every group is the "tp-dp-pp" one, and coordinates round-trip with cp.
TEST(Layout, ContextParallelCoordinatesRoundTrip) {
  for (int world : {2, 4, 8, 16})
    for (int tp : {1, 2})
      for (int cp : {1, 2, 4})
        for (int pp : {1, 2}) {
          if (world % (tp * cp * pp)) continue;
          Layout l = Layout::make(world, tp, pp, 1, cp);
          for (int g = 0; g < world; ++g) {
            EXPECT_EQ(l.global_rank(l.tp_rank(g), l.dp_rank(g), l.pp_rank(g), l.cp_rank(g)), g);
            for (const auto& grp : l.cp_groups())
              for (size_t i = 0; i < grp.size(); ++i) {
                EXPECT_EQ(l.cp_rank(grp[i]), int(i));
                EXPECT_EQ(l.dp_rank(grp[i]), l.dp_rank(grp[0]));
                EXPECT_EQ(l.tp_rank(grp[i]), l.tp_rank(grp[0]));
              }
          }
          if (cp == 1) EXPECT_EQ(l.dp_cp_groups(), l.dp_groups());
          EXPECT_EQ(int(l.dp_cp_groups().front().size()), l.dp * cp);
        }
}

TEST(Layout, EmbeddingGroupsSkipMiddleStages) {
  Layout l = Layout::make(4, 1, 4);
  EXPECT_EQ(l.embd_groups(), (RankGroups{{0, 3}}));
  Layout l1 = Layout::make(4, 2, 1);
  EXPECT_EQ(l1.embd_groups(), (RankGroups{{0}, {1}, {2}, {3}}));
}

static std::string error_of(int world, int tp, int pp, int vpp = 1) {
  try {
    Layout::make(world, tp, pp, vpp);
  } catch (const tripod::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Layout, ValidationNamesTheFlags) {
  std::string e = error_of(8, 3, 1);
  EXPECT_NE(e.find("--tensor-model-parallel-size 3"), std::string::npos) << e;
  EXPECT_NE(e.find("--pipeline-model-parallel-size 1"), std::string::npos) << e;
  EXPECT_NE(e.find("world size 8"), std::string::npos) << e;
  EXPECT_NE(error_of(8, 0, 1).find("--tensor-model-parallel-size must be >= 1"), std::string::npos);
  EXPECT_NE(error_of(8, 1, 0).find("--pipeline-model-parallel-size must be >= 1"), std::string::npos);
  EXPECT_NE(error_of(8, 2, 1, 2).find("single pipeline stage"), std::string::npos);
  EXPECT_EQ(error_of(8, 2, 2, 2), "");
  try {
    Layout::make(8, 1, 1, 1, 3);
    ADD_FAILURE() << "cp 3 on 8 ranks accepted";
  } catch (const tripod::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--context-parallel-size 3"), std::string::npos) << e.what();
  }
}

TEST(ProcessGroups, SingleProcessWorldIsLocal) {
  using namespace tripod;
  auto ctx = comm::DistContext::init(comm::RankInfo{}, DeviceType::CPU, std::chrono::seconds(5));
  auto pg = parallel::make_process_groups(*ctx, Layout::make(1, 1, 1));
  for (auto* c : {&pg.world, &pg.tp, &pg.dp, &pg.pp, &pg.mp, &pg.embd}) {
    ASSERT_TRUE(*c);
    EXPECT_EQ((*c)->size(), 1);
    EXPECT_EQ((*c)->rank(), 0);
  }
  EXPECT_EQ(pg.tp->name(), "tp");
  Tensor in = Tensor::empty({3}, DType::F32), out = Tensor::empty({3}, DType::F32);
  for (int i = 0; i < 3; ++i) in.data<float>()[i] = float(i + 1);
  pg.tp->all_reduce(in)->wait();
  EXPECT_EQ(in.data<float>()[2], 3.0f);
  pg.dp->all_gather(out, in)->wait();
  EXPECT_EQ(out.data<float>()[1], 2.0f);
  pg.world->barrier();
  EXPECT_THROW(pg.pp->send(in, 0), Error);
}
