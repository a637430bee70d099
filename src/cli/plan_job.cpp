// Implementation of cli/plan_job.h.
#include "cli/plan_job.h"

#include <algorithm>

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
  l.recompute = a.parallel.recompute;
  l.dtype = a.precision.compute_dtype;
  job.local_world_size = local_world_size;
  job.cpu_device = a.device == "cpu";
  return job;
}

plan::Job plan_job(const train::TrainArgs& a, int world_size, int local_world_size) {
  config::Layout ranks;
  const int tp = a.parallel.tp, pp = a.parallel.pp, cp = std::max(1, a.parallel.cp);
  if (world_size % (tp * pp * cp) == 0) {
    ranks = config::Layout::make(world_size, tp, pp, 1, cp);
    ranks.vpp = std::max(1, train::virtual_pipeline_size(a));
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
