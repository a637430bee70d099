// Implementation of parallel/tp_regions.h: three collectives (all-reduce,
// all-gather and reduce-scatter along the rows) and the regions on top.
#include "parallel/tp_regions.h"

#include <cstring>

#include "base/error.h"

namespace tripod::parallel {
namespace {

// mappings.py's _gather_along_first_dim.
void all_gather_rows(comm::Communicator* tp, Tensor& full, const Tensor& shard, const char* what) {
  if (!tp_active(tp)) {
    TRIPOD_CHECK(full.is_cpu(), "{} without a tp group on {}", what, full.str());
    if (full.raw() != shard.raw()) std::memcpy(full.raw(), shard.raw(), full.nbytes());
    return;
  }
  TRIPOD_CHECK(full.numel() == shard.numel() * tp->size(), "{}: {} from {} x {}", what, full.str(), tp->size(),
               shard.str());
  Tensor f = full.view({full.numel()});
  tp->all_gather(f, shard.view({shard.numel()}))->wait();
}

// mappings.py's _reduce_scatter_along_first_dim.
void reduce_scatter_rows(comm::Communicator* tp, Tensor& shard, const Tensor& full, const char* what) {
  if (!tp_active(tp)) {
    TRIPOD_CHECK(full.is_cpu(), "{} without a tp group on {}", what, full.str());
    if (full.raw() != shard.raw()) std::memcpy(shard.raw(), full.raw(), shard.nbytes());
    return;
  }
  TRIPOD_CHECK(full.numel() == shard.numel() * tp->size(), "{}: {} into {} x {}", what, full.str(), tp->size(),
               shard.str());
  Tensor s = shard.view({shard.numel()});
  tp->reduce_scatter(s, full.view({full.numel()}))->wait();
}

}  // namespace

void tensor_model_parallel_all_reduce(comm::Communicator* tp, Tensor& t, comm::ReduceOp op) {
  if (!tp_active(tp)) return;
  comm::AllReduceOptions o;
  o.op = op;
  tp->all_reduce(t, o)->wait();
}

void copy_to_tensor_model_parallel_region_backward(comm::Communicator* tp, Tensor& dx) {
  tensor_model_parallel_all_reduce(tp, dx);
}

void reduce_from_tensor_model_parallel_region(comm::Communicator* tp, Tensor& x) {
  tensor_model_parallel_all_reduce(tp, x);
}

// mappings.py's _split_along_first_dim (a view, as there).
Tensor scatter_to_sequence_parallel_region(comm::Communicator* tp, const Tensor& full) {
  if (!tp_active(tp)) return full;
  const int64_t rows = full.size(0) / tp->size();
  TRIPOD_CHECK(rows * tp->size() == full.size(0), "scatter_to_sequence_parallel_region: {} rows of {} in {} shards",
               full.size(0), full.str(), tp->size());
  return full.narrow(tp->rank() * rows, rows);
}

void scatter_to_sequence_parallel_region_backward(comm::Communicator* tp, Tensor& dfull, const Tensor& dshard) {
  all_gather_rows(tp, dfull, dshard, "scatter_to_sequence_parallel_region_backward");
}

void gather_from_sequence_parallel_region(comm::Communicator* tp, Tensor& full, const Tensor& shard) {
  all_gather_rows(tp, full, shard, "gather_from_sequence_parallel_region");
}

void gather_from_sequence_parallel_region_backward(comm::Communicator* tp, Tensor& dshard, const Tensor& dfull) {
  reduce_scatter_rows(tp, dshard, dfull, "gather_from_sequence_parallel_region_backward");
}

void reduce_scatter_to_sequence_parallel_region(comm::Communicator* tp, Tensor& shard, const Tensor& full) {
  reduce_scatter_rows(tp, shard, full, "reduce_scatter_to_sequence_parallel_region");
}

void reduce_scatter_to_sequence_parallel_region_backward(comm::Communicator* tp, Tensor& dfull,
                                                         const Tensor& dshard) {
  all_gather_rows(tp, dfull, dshard, "reduce_scatter_to_sequence_parallel_region_backward");
}

}  // namespace tripod::parallel
