// Implementation of cli/plan_job.h.
#include "cli/plan_job.h"

#include <algorithm>

#include "train/trainer.h"

namespace tripod::cli {

plan::Job plan_job(const train::TrainArgs& a, const config::Layout& ranks, int local_world_size) {
  plan::Job job;
  job.model = a.model;
  job.model.finalize();
  job.layout = plan::Layout(ranks);
  plan::Layout& l = job.layout;
  l.micro_batch = a.micro_batch_size;
  l.global_batch = a.global_batch_size > 0 ? a.global_batch_size : a.micro_batch_size * std::max(1, l.dp);
  l.sequence_parallel = a.sequence_parallel;
  l.distributed_optimizer = a.use_distributed_optimizer;
  const std::string g = a.recompute_granularity.empty() && a.recompute_activations ? "selective"
                                                                                     : a.recompute_granularity;
  l.recompute = g.empty() ? config::Recompute::None : config::recompute_from_string(g);
  l.dtype = a.bf16 ? DType::BF16 : a.fp16 ? DType::F16 : DType::F32;
  job.local_world_size = local_world_size;
  job.cpu_device = a.device == "cpu";
  return job;
}

plan::Job plan_job(const train::TrainArgs& a, int world_size, int local_world_size) {
  config::Layout ranks;
  if (world_size % (a.tp * a.pp) == 0) {
    ranks = config::Layout::make(world_size, a.tp, a.pp);
    ranks.vpp = std::max(1, train::virtual_pipeline_size(a));
  } else {
    ranks.world_size = world_size, ranks.tp = a.tp, ranks.pp = a.pp, ranks.dp = 0;
  }
  plan::Job job = plan_job(a, ranks, local_world_size);
  // The search's global batch with the DP these GPUs would give.
  if (ranks.dp == 0 && a.global_batch_size <= 0)
    job.layout.global_batch = a.micro_batch_size * std::max(1, world_size / (a.tp * a.pp));
  return job;
}

}  // namespace tripod::cli
