// The gradient reductions between the backward and the optimizer step
// (Megatron-core's finalize_model_grads in distributed/finalize_model_grads.py),
// in this order:
//   1. sequence-parallel LayerNorm (and other replicated-over-tp) gradients
//      summed over tp (without --overlap-grad-reduce; with it the backward
//      hook already did, see DistributedDataParallel::register_grad_ready);
//   2. the tied word embedding: the first stage's embedding and the last
//      stage's output layer both get the sum of their gradients over the
//      embedding group, so they stay equal after identical updates;
//   3. the data-parallel reduction: every bucket not launched yet (all of
//      them without overlap; the deferred embedding bucket with it, which
//      must follow step 2), then waiting for all (all-reduce, or
//      reduce-scatter into this rank's shard with the distributed optimizer).
// Megatron runs the dp reduction first and then the embedding all-reduce on
// the reduced grads; both orders give the same sums, tripod keeps the one
// that lets the embedding's dp bucket carry the embedding-group sum.
#pragma once

#include "distributed/distributed_data_parallel.h"
#include "parallel/groups.h"

namespace tripod::distributed {

void finalize_model_grads(DistributedDataParallel& ddp, const parallel::ProcessGroups& groups);

}  // namespace tripod::distributed
