// Layout: how the world of ranks is split into tensor-, context-, data- and
// pipeline-parallel groups, in Megatron's rank order. Pure rank arithmetic
// (no communicator): the trainer's groups (parallel/groups.h, which reaches
// it as parallel::Layout) and the planner's search points (plan/search.h)
// read the sizes and ranks of every parallel dimension from here, dp
// computed once by Layout::make.
//
// Relates to: parallel/groups.h (turns these rank lists into communicators),
// docs/distributed.md (the worked examples below, with pictures).
// Reference: Megatron-LM megatron/core/parallel_state.py (RankGenerator,
// generate_masked_orthogonal_rank_groups, initialize_model_parallel).
//
// NOTE [Rank order]
// The order string is "tp-cp-dp-pp": tp varies fastest, then cp, then dp,
// then pp, so
//   global_rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank)).
// Tensor-parallel peers (the most traffic) are neighbours, i.e. on one node;
// context-parallel peers (the K/V ring of every attention layer) next.
// Without context parallelism (cp = 1) the order is "tp-dp-pp" exactly.
// Megatron's dense order is "tp-cp-ep-dp-pp": expert parallel (ep) takes its
// place inside dp the same way; masked_rank_groups serves any order.
// Gradients are reduced over dp x cp (dp_cp groups): every cp rank holds the
// whole model and a share of every sequence's tokens, as Megatron's
// data_parallel_group_with_context_parallel.
//
// Worked example, 8 ranks, tp=2 pp=2 (dp = 8 / (2*2) = 2):
//   tp groups  : [0,1] [2,3] [4,5] [6,7]
//   dp groups  : [0,2] [1,3] [4,6] [5,7]
//   pp groups  : [0,4] [1,5] [2,6] [3,7]
//   mp groups  : [0,1,4,5] [2,3,6,7]        (tp x pp: one model replica)
//   embd groups: [0,4] [1,5] [2,6] [3,7]    (first and last stage of each pp group)
// Worked example, 16 ranks, tp=2 pp=4 (dp=2), as in Megatron's docstring:
//   tp groups  : [0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]
//   dp groups  : [0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]
//   pp groups  : [0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]
//   embd groups: [0,12] [1,13] [2,14] [3,15]  (ranks 4..11 are middle stages: no embd group)
// Worked example, 8 ranks, tp=2 cp=2 pp=2 (dp = 8 / (2*2*2) = 1):
//   tp groups   : [0,1] [2,3] [4,5] [6,7]
//   cp groups   : [0,2] [1,3] [4,6] [5,7]
//   dp groups   : [0] [1] [2] [3] [4] [5] [6] [7]
//   dp_cp groups: [0,2] [1,3] [4,6] [5,7]   (gradient reduction)
//   pp groups   : [0,4] [1,5] [2,6] [3,7]
//   mp groups   : [0,1,4,5] [2,3,6,7]       (tp x pp, as without cp)
// Worked example, 8 ranks, cp=2 (tp=1 pp=1, dp=4):
//   cp groups   : [0,1] [2,3] [4,5] [6,7]
//   dp groups   : [0,2,4,6] [1,3,5,7]
//   dp_cp groups: [0,1,2,3,4,5,6,7]
//
// Usage:
//   Layout layout = Layout::make(world_size, tp, pp, vpp);   // throws on bad sizes
//   int stage = layout.pp_rank(global_rank);
#pragma once

#include <string>
#include <vector>

namespace tripod::config {

using RankGroups = std::vector<std::vector<int>>;

// The dimensions, fastest first (NOTE [Rank order]).
inline constexpr const char* kRankOrder = "tp-cp-dp-pp";
// The experts' own order (NOTE [Expert rank order]): etp, ep, edp, pp.
inline constexpr const char* kExpertRankOrder = "tp-ep-dp-pp";

struct Layout {
  int world_size = 1;
  int tp = 1;   // --tensor-model-parallel-size
  int pp = 1;   // --pipeline-model-parallel-size
  int dp = 1;   // world_size / (tp * cp * pp)
  int vpp = 1;  // virtual pipeline stages per pp rank; 1 = no interleaving
  int cp = 1;   // --context-parallel-size
  // Expert parallelism (NOTE [Expert rank order]): the MoE layers' experts
  // are split over ep ranks carved out of the data-parallel ranks.
  int ep = 1;   // --expert-model-parallel-size
  int etp = 1;  // --expert-tensor-parallel-size (1: the experts are not split by tp)

  // Validates and derives dp. Errors name the Megatron flags.
  static Layout make(int world_size, int tp, int pp, int vpp = 1, int cp = 1);

  int tp_rank(int global) const;
  int cp_rank(int global) const;
  int dp_rank(int global) const;
  int pp_rank(int global) const;
  // Inverse of the four above.
  int global_rank(int tp_rank, int dp_rank, int pp_rank, int cp_rank = 0) const;
  bool is_first_stage(int global) const { return pp_rank(global) == 0; }
  bool is_last_stage(int global) const { return pp_rank(global) == pp - 1; }

  // Each list is ordered as Megatron orders it; members in increasing
  // rank order. tp/dp/pp/mp partition the world; embd covers only the
  // first and last stages (all ranks when pp <= 2).
  RankGroups tp_groups() const;
  RankGroups dp_groups() const;
  RankGroups pp_groups() const;
  RankGroups mp_groups() const;    // tp x pp
  RankGroups embd_groups() const;  // {first, last} stage of each pp group
  RankGroups cp_groups() const;     // context-parallel peers (one sequence's ring)
  RankGroups dp_cp_groups() const;  // dp x cp: where gradients are reduced

  // NOTE [Expert rank order]
  // Megatron's expert rank generator ("parallel folding"): its own order
  // "tp-ep-dp-pp" over the sizes [etp, ep, edp, pp], edp = world / (etp x
  // ep x pp), independent of the dense "tp-cp-dp-pp" order except for pp
  // (the outermost in both, so the ep peers are ranks of one stage). The ep
  // peers are etp apart; edp strides by etp x ep. With etp 1 the ep group
  // may fold onto the dense tp, cp and dp ranks, and edp spans whatever of
  // tp x cp x dp ep leaves. With etp = tp (the other size accepted here)
  // the expert-tp groups are the dense tp groups, and ep and edp fold onto
  // cp and dp only.
  //   ep_rank(g) = (g / etp) % ep
  // Worked example, 8 ranks, pp=2, ep=2 (tp 1, dp 4, edp 2):
  //   ep groups  : [0,1] [2,3] [4,5] [6,7]
  //   edp groups : [0,2] [1,3] [4,6] [5,7]
  // Worked example, 4 ranks, tp=2 ep=2 (dp 2, edp 2): ep folds onto tp.
  //   tp groups  : [0,1] [2,3]         dp groups : [0,2] [1,3]
  //   ep groups  : [0,1] [2,3]         edp groups: [0,2] [1,3]
  // Worked example, 4 ranks, tp=2 ep=1 (dp 2, edp 4): every expert on
  // every rank, its replicas the tp and dp ranks together.
  //   ep groups  : [0] [1] [2] [3]     edp groups: [0,1,2,3]
  // Worked example, 8 ranks, tp=2 cp=2 ep=2 (dp 2, edp 4): ep folds onto
  // tp; edp spans cp and dp.
  //   ep groups  : [0,1] [2,3] [4,5] [6,7]
  //   edp groups : [0,2,4,6] [1,3,5,7]
  // Worked example, 4 ranks, cp=2 ep=4 (tp 1, dp 2, edp 1): ep spans cp and dp.
  //   ep groups  : [0,1,2,3]           edp groups: [0] [1] [2] [3]
  // Worked example, 8 ranks, tp=2 etp=2 ep=2 (dp 4, edp 2): the experts
  // split over the tp groups, ep over dp.
  //   etp groups : [0,1] [2,3] [4,5] [6,7]  (= tp groups)
  //   ep groups  : [0,2] [1,3] [4,6] [5,7]  edp groups: [0,4] [1,5] [2,6] [3,7]
  // Validates ep and etp (the world divisible by etp x ep x pp; etp 1 or
  // the tp size) and returns the layout with them.
  // --num-experts divisible by ep is the model's check (gpt_model.cpp).
  Layout with_expert_parallel(int ep_size, int etp_size = 1) const;
  int edp() const { return world_size / (etp * ep * pp); }  // expert-data-parallel size
  int ep_rank(int global) const { return (global / etp) % ep; }
  RankGroups ep_groups() const;
  RankGroups expert_dp_groups() const;

  // "world 8 = tp 2 x dp 2 x pp 2 (vpp 1)", with " x cp N" after tp when cp > 1.
  std::string str() const;
};

// The group mechanism behind the accessors above, for other orders (tests,
// future cp/ep). `order` names the dims fastest first ("tp-dp-pp"), `sizes`
// gives their sizes in the same order, and `mask` the dims that vary inside
// one group (e.g. "tp-pp" for model-parallel groups).
RankGroups masked_rank_groups(const std::string& order, const std::vector<int>& sizes,
                              const std::string& mask);

}  // namespace tripod::config
