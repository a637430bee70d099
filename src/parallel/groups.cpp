// Implementation of parallel/groups.h.
#include "parallel/groups.h"

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
  return t;
}

}  // namespace tripod::parallel
