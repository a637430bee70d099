// Tensor- and sequence-parallel communication regions, with Megatron's names
// (megatron/core/tensor_parallel/mappings.py). Megatron wraps each in an
// autograd function; tripod has explicit backward passes, so each region is
// a pair of functions: the forward, and `<name>_backward` (its conjugate).
// With tp size 1 (or a null group) every function is a no-op or a copy:
// the plain fast path.
//
//   region                                      forward               backward
//   copy_to_tensor_model_parallel_region        identity              all-reduce        (f)
//   reduce_from_tensor_model_parallel_region    all-reduce            identity          (g)
//   scatter_to_sequence_parallel_region         keep own rows         all-gather rows
//   gather_from_sequence_parallel_region        all-gather rows       reduce-scatter rows
//   reduce_scatter_to_sequence_parallel_region  reduce-scatter rows   all-gather rows
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

inline bool tp_active(const comm::Communicator* tp) { return tp && tp->size() > 1; }

// A plain all-reduce over the tp group, in place (the collective under the
// regions; also the vocab-parallel cross-entropy's statistics and Megatron's
// all-reduce of sequence-parallel LayerNorm gradients).
void tensor_model_parallel_all_reduce(comm::Communicator* tp, Tensor& t,
                                      comm::ReduceOp op = comm::ReduceOp::Sum);

// f: x is replicated; forward is the identity, backward sums the partial
// input gradients of the column-parallel ranks (in place).
inline const Tensor& copy_to_tensor_model_parallel_region(const Tensor& x) { return x; }
void copy_to_tensor_model_parallel_region_backward(comm::Communicator* tp, Tensor& dx);

// g: forward sums the row-parallel partial outputs (in place); backward is
// the identity.
void reduce_from_tensor_model_parallel_region(comm::Communicator* tp, Tensor& x);
inline const Tensor& reduce_from_tensor_model_parallel_region_backward(const Tensor& dy) { return dy; }

// This rank's rows of full (N, C): a view (N/tp, C), no copy; backward:
// all-gather.
Tensor scatter_to_sequence_parallel_region(comm::Communicator* tp, const Tensor& full);
void scatter_to_sequence_parallel_region_backward(comm::Communicator* tp, Tensor& dfull, const Tensor& dshard);

// full (N, C) <- all-gather of shard (N/tp, C) in rank order; backward:
// dshard <- this rank's rows of the sum over tp of dfull (reduce-scatter).
void gather_from_sequence_parallel_region(comm::Communicator* tp, Tensor& full, const Tensor& shard);
void gather_from_sequence_parallel_region_backward(comm::Communicator* tp, Tensor& dshard, const Tensor& dfull);

// shard (N/tp, C) <- this rank's rows of the sum over tp of full (N, C);
// backward: all-gather.
void reduce_scatter_to_sequence_parallel_region(comm::Communicator* tp, Tensor& shard, const Tensor& full);
void reduce_scatter_to_sequence_parallel_region_backward(comm::Communicator* tp, Tensor& dfull,
                                                         const Tensor& dshard);

}  // namespace tripod::parallel
