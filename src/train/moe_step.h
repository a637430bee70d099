// The mixture-of-experts work at the end of a training iteration
// (Megatron's finalize_model_grads _update_router_expert_bias and
// track_moe_metrics): the tokens each expert received, summed over every
// rank that holds a copy of the layer's router, drive DeepSeek-V3's
// expert-bias update; the load-balancing and z losses and the tokens per
// expert are the iteration's MoE metrics (log line, JSONL, TensorBoard).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "backend/ops.h"
#include "model/gpt_model.h"
#include "parallel/groups.h"

namespace tripod::train {

struct MoeStepMetrics {
  // Means over the MoE layers, micro-batches and data-parallel ranks of the
  // losses without their coefficients (Megatron's load_balancing_loss, z_loss).
  double load_balancing_loss = 0, z_loss = 0;
  // Tokens of the global batch per expert (k per token, after capacity
  // dropping), the least and the most over every expert of every MoE layer.
  int64_t min_tokens_per_expert = 0, max_tokens_per_expert = 0;
};

// Every rank calls it after the optimizer step when the model has experts
// (collectives over the dp group and the world). Updates the expert biases.
MoeStepMetrics moe_end_iteration(const std::vector<model::GptModel*>& chunks, const parallel::ProcessGroups& groups,
                                 backend::Backend& be);

}  // namespace tripod::train
