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
  int global_rank = 0;
  Layout layout;
};

// Collective over the world: every rank calls it with the same layout.
// Groups are made in the order world, tp, dp, pp, mp, embd, then cp and
// dp_cp (only when cp > 1, so layouts without cp create what they did), then
// ep and edp (at ep > 1).
ProcessGroups make_process_groups(comm::DistContext& ctx, const Layout& layout);

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

// Replaces pg.tp, pg.embd and pg.dp by timing decorators
// (comm/timed_communicator.h) where the group has more than one rank, so
// single-rank groups cost nothing and read exactly 0. Call before handing
// the communicators to models or buckets.
CommTimers time_communication(ProcessGroups& pg);

}  // namespace tripod::parallel
