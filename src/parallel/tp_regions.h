// Tensor- and sequence-parallel communication points, with Megatron's names
// (megatron/core/tensor_parallel/mappings.py). Each is a conjugate pair: the
// forward op here, the backward op named in the comment. With tp size 1
// (or a null group) every function is a no-op: the plain fast path.
//
//   copy_to_tp_region        fwd: identity             bwd: all-reduce   (f)
//   reduce_from_tp_region    fwd: all-reduce           bwd: identity     (g)
//   gather_from_sp_region    fwd: all-gather rows      bwd: reduce-scatter rows
//   reduce_scatter_to_sp_region fwd: reduce-scatter rows bwd: all-gather rows
//
// Sequence-parallel shards are contiguous row blocks of the (N = B*T, C)
// activations: rank r holds rows [r N/tp, (r+1) N/tp). tripod keeps
// activations batch-major (B,T,C) where Megatron keeps (T,B,C), so its
// shards are token blocks rather than sequence slices; LayerNorm and dropout
// act per token, so the numbers are the same. See docs/parallelism.md.
#pragma once

#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace tripod::parallel {

// In place. Backward of copy_to_tp_region and forward of reduce_from_tp_region.
void tp_all_reduce(comm::Communicator* tp, Tensor& t);
// full (N, C) <- all-gather of shard (N/tp, C) over tp, in rank order.
void sp_all_gather(comm::Communicator* tp, Tensor& full, const Tensor& shard);
// shard (N/tp, C) <- this rank's rows of the sum over tp of full (N, C).
void sp_reduce_scatter(comm::Communicator* tp, Tensor& shard, const Tensor& full);

inline bool tp_active(const comm::Communicator* tp) { return tp && tp->size() > 1; }

}  // namespace tripod::parallel
