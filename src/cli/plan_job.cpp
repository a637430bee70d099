// Implementation of cli/plan_job.h.
#include "cli/plan_job.h"

#include <algorithm>
#include <string>
#include <type_traits>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "train/flag_table.h"
#include "train/trainer.h"

namespace tripod::cli {

plan::Job plan_job(const train::TrainArgs& args, const config::Layout& ranks, int local_world_size) {
  // The derived values (the model's widths, the default global batch, the
  // compute dtype, the recompute kind) as the trainer resolves them.
  train::TrainArgs a = args;
  a.resolve(ranks);
  plan::Job job;
  job.model = a.model;
  job.layout = plan::Layout(ranks);
  plan::Layout& l = job.layout;
  l.micro_batch = a.batch.micro_batch_size;
  l.global_batch = a.batch.global_batch_size > 0 ? a.batch.global_batch_size
                                                 : a.batch.micro_batch_size * std::max(1, l.dp);
  l.sequence_parallel = a.parallel.sequence_parallel;
  const auto sharding = distributed::resolve_sharding_strategy(
      a.parallel.data_parallel_sharding_strategy, a.parallel.use_megatron_fsdp, a.parallel.ddp.use_distributed_optimizer);
  l.distributed_optimizer = sharding >= distributed::ShardingStrategy::Optim;
  l.zero_stage = sharding == distributed::ShardingStrategy::OptimGradsParams ? 3
                 : sharding == distributed::ShardingStrategy::OptimGrads     ? 2
                                                                              : 0;
  l.dist_opt_instances = a.parallel.ddp.num_distributed_optimizer_instances;
  l.overlap_param_gather = l.zero_stage == 3 && a.parallel.ddp.overlap_param_gather;
  l.recompute = a.parallel.recompute;
  // --cp-comm-type: one for all layers (a per-layer list plans as the ring).
  if (a.parallel.cp_comm_type.size() == 1)
    l.cp_comm = config::cp_comm_type_from_name(a.parallel.cp_comm_type[0]).value_or(config::CpCommType::P2p);
  l.dtype = a.precision.compute_dtype;
  job.local_world_size = local_world_size;
  job.cpu_device = a.device == "cpu";
  job.model_flags = plan_model_flags(args);
  return job;
}

std::string plan_model_flags(const train::TrainArgs& a) {
  const train::TrainArgs defaults;
  // The shape flags `tripod plan` requires are always spelled out.
  const auto required = [](const std::string& n) {
    return n == "--num-layers" || n == "--hidden-size" || n == "--num-attention-heads" || n == "--seq-length";
  };
  std::string s;
  for (const train::FlagRow& row : train::flag_table()) {
    if (!(row.commands & train::kPlan) || !row.bound()) continue;
    const bool always = required(row.name);
    const train::FlagRef given = row.member(const_cast<train::TrainArgs&>(a));
    const train::FlagRef unset = row.member(const_cast<train::TrainArgs&>(defaults));
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          const T& d = *std::get<T*>(unset);
          if (*p == d && !always) return;
          if constexpr (std::is_same_v<T, bool>) {
            s += fmt::format(" {}", row.name);
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            s += fmt::format(" {} {}", row.name, fmt::join(*p, " "));
          } else {
            s += fmt::format(" {} {}", row.name, *p);
          }
        },
        given);
  }
  return s.empty() ? s : s.substr(1);
}

plan::Job plan_job(const train::TrainArgs& a, int world_size, int local_world_size) {
  config::Layout ranks;
  const int tp = a.parallel.tp, pp = a.parallel.pp, cp = std::max(1, a.parallel.cp);
  if (world_size % (tp * pp * cp) == 0) {
    ranks = config::Layout::make(world_size, tp, pp, 1, cp);
    ranks.vpp = std::max(1, train::virtual_pipeline_size(a));
    const int etp = train::expert_tensor_parallel_size(a) == tp ? tp : 1;
    if ((a.parallel.ep > 1 || etp > 1) && world_size % (etp * a.parallel.ep * pp) == 0)
      ranks = ranks.with_expert_parallel(a.parallel.ep, etp);
  } else {
    ranks.world_size = world_size, ranks.tp = tp, ranks.pp = pp, ranks.cp = cp, ranks.dp = 0;
  }
  plan::Job job = plan_job(a, ranks, local_world_size);
  // The search's global batch with the DP these GPUs would give.
  if (ranks.dp == 0 && a.batch.global_batch_size <= 0)
    job.layout.global_batch = a.batch.micro_batch_size * std::max(1, world_size / (tp * pp * cp));
  return job;
}

}  // namespace tripod::cli
