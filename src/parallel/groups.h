// ProcessGroups: the communicators of one rank, built once from a Layout and
// passed explicitly to every layer and schedule (no global parallel state;
// Megatron issue #6307 is why).
//
// Relates to: parallel/layout.h (the rank lists), comm/context.h (new_group).
// Reference: Megatron-LM megatron/core/process_groups_config.py
// (ProcessGroupCollection).
//
// Usage:
//   auto ctx = comm::DistContext::init(comm::resolve_rank_info(), DeviceType::CPU, timeout);
//   Layout layout = Layout::make(ctx->world_size(), tp, pp, vpp);
//   ProcessGroups pg = make_process_groups(*ctx, layout);
//   pg.tp->all_reduce(partial)->wait();       // pg.tp->rank() == layout.tp_rank(pg.global_rank)
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/context.h"
#include "comm/timed_communicator.h"
#include "parallel/layout.h"

namespace tripod::parallel {

struct ProcessGroups {
  std::shared_ptr<comm::Communicator> world;
  std::shared_ptr<comm::Communicator> tp;    // tensor-parallel peers
  std::shared_ptr<comm::Communicator> pp;    // pipeline stages of this model replica
  std::shared_ptr<comm::Communicator> dp;    // data-parallel replicas
  std::shared_ptr<comm::Communicator> mp;    // tp x pp: one whole model replica
  std::shared_ptr<comm::Communicator> embd;  // first + last stage; null on middle stages
  // Context parallelism (--context-parallel-size): the ranks that share one
  // sequence (the ring attention passes K/V around), and dp x cp, where
  // gradients and the loss are reduced. At cp 1, cp is a group of one and
  // dp_cp is dp itself (the same communicator).
  std::shared_ptr<comm::Communicator> cp;
  std::shared_ptr<comm::Communicator> dp_cp;
  // Expert parallelism (config/layout.h, NOTE [Expert rank order]); null at ep 1.
  std::shared_ptr<comm::Communicator> ep;    // the ranks the experts are split over
  std::shared_ptr<comm::Communicator> edp;   // the replicas of one expert
  // Hybrid sharding (--num-distributed-optimizer-instances N > 1, NOTE
  // [Distributed-optimizer instances]); null at N = 1 (dp_cp is the shard group):
  std::shared_ptr<comm::Communicator> intra_dp_cp;     // one instance: the ranks the shards split over
  std::shared_ptr<comm::Communicator> inter_dist_opt;  // the same shard in every instance: grads all-reduced
  std::shared_ptr<comm::Communicator> intra_dist_opt;  // mp x intra_dp_cp: the grad norm's sum
  int global_rank = 0;
  Layout layout;
};

// Collective over the world: every rank calls it with the same layout.
// Groups are made in the order world, tp, dp, pp, mp, embd, then cp and
// dp_cp (only when cp > 1, so layouts without cp create what they did), then
// ep and edp (at ep > 1).
ProcessGroups make_process_groups(comm::DistContext& ctx, const Layout& layout);

// NOTE [Distributed-optimizer instances]
// Megatron's --num-distributed-optimizer-instances N (a "partial"
// distributed optimizer; FSDP's hybrid sharding, HSDP): each dp_cp group is
// cut into N runs of consecutive ranks, the instances. The optimizer state
// (and under ZeRO-2/3 the gradients and parameters) is sharded over the
// ranks of one instance (intra_dp_cp) and replicated across instances: the
// gradients are reduce-scattered inside the instance, then the shard is
// all-reduced over inter_dist_opt (the ranks holding the same shard in
// every instance). With the dp ranks of one node consecutive (tp = 1, or
// tp x dp_instance fitting a node) the shard traffic stays on the node and
// only 1/instance-size of the gradients crosses nodes. Worked example, 8
// ranks, tp=2 (dp = 4), N = 2:
//   dp groups            : [0,2,4,6] [1,3,5,7]
//   intra_dp_cp groups   : [0,2] [4,6] [1,3] [5,7]
//   inter_dist_opt groups: [0,4] [2,6] [1,5] [3,7]
//   intra_dist_opt groups: [0,1,2,3] [4,5,6,7]   (the ranks of one instance: the grad norm)
struct DistributedOptimizerInstanceGroups {
  RankGroups intra_dp_cp, inter_dist_opt, intra_dist_opt;
};
// Throws naming the flag when N does not divide dp x cp.
DistributedOptimizerInstanceGroups distributed_optimizer_instance_groups(const Layout& layout, int instances);
// Collective over the world: fills pg's three instance groups (nothing at N = 1).
void make_distributed_optimizer_instance_groups(comm::DistContext& ctx, ProcessGroups& pg, int instances);

// Host time blocked in communication, per kind, for the iteration time
// split (cumulative; take differences). tp also counts the embedding
// group's tied-embedding gradient sum; pp p2p waits are timed by the
// schedule (ScheduleStats::wait_seconds), world and mp (grad norm, exit
// flag) are not timed here.
struct CommTimers {
  std::shared_ptr<comm::CommTimer> tp = std::make_shared<comm::CommTimer>();
  std::shared_ptr<comm::CommTimer> dp = std::make_shared<comm::CommTimer>();
};

// The groups data parallelism works on: pg with dp replaced by dp_cp, so
// distributed/ (buckets, the distributed optimizer's shards, the loss and
// FP8 amax reductions) reduces over dp x cp without knowing about cp.
ProcessGroups data_parallel_view(const ProcessGroups& pg);

// Replaces pg.tp, pg.embd and pg.dp (and the other groups gradients are
// reduced over: dp_cp, the distributed-optimizer instances, edp) by timing decorators
// (comm/timed_communicator.h) where the group has more than one rank, so
// single-rank groups cost nothing and read exactly 0. Call before handing
// the communicators to models or buckets.
CommTimers time_communication(ProcessGroups& pg);

}  // namespace tripod::parallel
