// Implementation of train/moe_step.h.
#include "train/moe_step.h"

#include <algorithm>
#include <limits>

#include "train/scalar_reduce.h"

namespace tripod::train {

MoeStepMetrics moe_end_iteration(const std::vector<model::GptModel*>& chunks, const parallel::ProcessGroups& g,
                                 backend::Backend& be) {
  std::vector<const model::MoeLayer*> layers;
  std::vector<model::MoeStats> stats;
  for (model::GptModel* m : chunks)
    for (const model::TransformerLayer& l : m->layers())
      if (const model::MoeLayer* moe = l.moe()) {
        layers.push_back(moe);
        stats.push_back(moe->take_stats());
      }
  // Tokens per expert of every local MoE layer, summed over every rank of
  // the stage: the tp ranks (each routes its own rows under SP) and the dp x
  // cp ranks (every peer holds the same layers, so the sizes agree).
  std::vector<int64_t> counts;
  for (const model::MoeStats& s : stats) counts.insert(counts.end(), s.tokens_per_expert.begin(), s.tokens_per_expert.end());
  if (g.layout.tp > 1) all_reduce_values(g.tp.get(), be, counts, comm::ReduceOp::Sum);
  all_reduce_values(g.dp_cp.get(), be, counts, comm::ReduceOp::Sum);
  int64_t at = 0, lo = std::numeric_limits<int64_t>::max(), hi = 0;
  for (const model::MoeLayer* l : layers) {
    const int64_t E = l->num_experts();
    std::vector<int64_t> layer_counts(counts.begin() + at, counts.begin() + at + E);
    at += E;
    l->update_expert_bias(layer_counts);  // no-op without --moe-router-enable-expert-bias
    for (int64_t c : layer_counts) lo = std::min(lo, c), hi = std::max(hi, c);
  }
  // Over the pipeline stages (the world: tp and dp copies agree already).
  std::vector<int64_t> extremes = {hi, layers.empty() ? std::numeric_limits<int64_t>::min() : -lo};
  all_reduce_values(g.world.get(), be, extremes, comm::ReduceOp::Max);
  std::vector<double> sums = {0, 0, 0};  // aux, z, (layer, micro-batch) pairs
  for (const model::MoeStats& s : stats) {
    sums[0] += s.aux_loss;
    sums[1] += s.z_loss;
    sums[2] += static_cast<double>(s.micro_batches);
  }
  all_reduce_values(g.world.get(), be, sums, comm::ReduceOp::Sum);
  MoeStepMetrics r;
  r.max_tokens_per_expert = extremes[0];
  r.min_tokens_per_expert = -extremes[1];
  if (sums[2] > 0) {
    r.load_balancing_loss = sums[0] / sums[2];
    r.z_loss = sums[1] / sums[2];
  }
  return r;
}

}  // namespace tripod::train
