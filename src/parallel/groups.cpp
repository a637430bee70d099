// Implementation of parallel/groups.h.
#include "parallel/groups.h"

#include <algorithm>

#include "base/error.h"

namespace tripod::parallel {

ProcessGroups make_process_groups(comm::DistContext& ctx, const Layout& layout) {
  TRIPOD_CHECK_HINT(layout.world_size == ctx.world_size(),
                    "build the layout with Layout::make(ctx.world_size(), ...)",
                    "layout is for {} ranks but the job has {}", layout.world_size,
                    ctx.world_size());
  ProcessGroups pg;
  pg.global_rank = ctx.rank();
  pg.layout = layout;
  pg.world = ctx.world();
  pg.tp = ctx.new_group(layout.tp_groups(), "tp");
  pg.dp = ctx.new_group(layout.dp_groups(), "dp");
  pg.pp = ctx.new_group(layout.pp_groups(), "pp");
  pg.mp = ctx.new_group(layout.mp_groups(), "mp");
  pg.embd = ctx.new_group(layout.embd_groups(), "embd");
  if (layout.cp > 1) {
    pg.cp = ctx.new_group(layout.cp_groups(), "cp");
    pg.dp_cp = ctx.new_group(layout.dp_cp_groups(), "dp_cp");
  } else {
    pg.cp = ctx.new_group(layout.cp_groups(), "cp");  // groups of one: local, no traffic
    pg.dp_cp = pg.dp;
  }
  if (layout.ep > 1) {
    pg.ep = ctx.new_group(layout.ep_groups(), "ep");
    pg.edp = ctx.new_group(layout.expert_dp_groups(), "edp");
  }
  return pg;
}

DistributedOptimizerInstanceGroups distributed_optimizer_instance_groups(const Layout& layout, int instances) {
  const int dp_cp = layout.dp * layout.cp;
  TRIPOD_CHECK_HINT(instances >= 1 && dp_cp % instances == 0,
                    "pass a --num-distributed-optimizer-instances that divides the data-parallel size",
                    "--num-distributed-optimizer-instances {} does not divide data-parallel x context-parallel "
                    "size {}", instances, dp_cp);
  const int n = dp_cp / instances;  // ranks per instance
  DistributedOptimizerInstanceGroups g;
  g.intra_dist_opt.resize(static_cast<size_t>(instances));
  for (const auto& ranks : layout.dp_cp_groups()) {
    for (int i = 0; i < instances; ++i) {
      const auto first = ranks.begin() + static_cast<std::ptrdiff_t>(i) * n;
      g.intra_dp_cp.emplace_back(first, first + n);
      auto& all = g.intra_dist_opt[static_cast<size_t>(i)];
      all.insert(all.end(), first, first + n);
    }
    for (int k = 0; k < n; ++k) {
      std::vector<int> same;
      for (int i = 0; i < instances; ++i) same.push_back(ranks[static_cast<size_t>(i * n + k)]);
      g.inter_dist_opt.push_back(std::move(same));
    }
  }
  for (auto& all : g.intra_dist_opt) std::sort(all.begin(), all.end());
  return g;
}

void make_distributed_optimizer_instance_groups(comm::DistContext& ctx, ProcessGroups& pg, int instances) {
  const auto g = distributed_optimizer_instance_groups(pg.layout, instances);
  if (instances == 1) return;
  pg.intra_dp_cp = ctx.new_group(g.intra_dp_cp, "intra_dp_cp");
  pg.inter_dist_opt = ctx.new_group(g.inter_dist_opt, "inter_dist_opt");
  pg.intra_dist_opt = ctx.new_group(g.intra_dist_opt, "intra_dist_opt");
}

ProcessGroups data_parallel_view(const ProcessGroups& pg) {
  ProcessGroups v = pg;
  if (pg.dp_cp) v.dp = pg.dp_cp;
  return v;
}

CommTimers time_communication(ProcessGroups& pg) {
  CommTimers t;
  auto wrap = [](std::shared_ptr<comm::Communicator>& g, const std::shared_ptr<comm::CommTimer>& timer) {
    if (g && g->size() > 1) g = comm::timed(g, timer);
  };
  wrap(pg.tp, t.tp);
  wrap(pg.embd, t.tp);
  const bool same = pg.dp_cp == pg.dp;
  wrap(pg.dp, t.dp);
  if (same) pg.dp_cp = pg.dp;
  else wrap(pg.dp_cp, t.dp);
  wrap(pg.intra_dp_cp, t.dp);
  wrap(pg.inter_dist_opt, t.dp);
  wrap(pg.edp, t.dp);  // the experts' gradient reductions (NOTE [Expert buckets])
  return t;
}

}  // namespace tripod::parallel
