// Implementation of parallel/tp_regions.h.
#include "parallel/tp_regions.h"

#include <cstring>

#include "base/error.h"

namespace tripod::parallel {

void tp_all_reduce(comm::Communicator* tp, Tensor& t) {
  if (!tp_active(tp)) return;
  tp->all_reduce(t)->wait();
}

void sp_all_gather(comm::Communicator* tp, Tensor& full, const Tensor& shard) {
  if (!tp_active(tp)) {
    TRIPOD_CHECK(full.is_cpu(), "sp_all_gather without a tp group on {}", full.str());
    if (full.raw() != shard.raw()) std::memcpy(full.raw(), shard.raw(), full.nbytes());
    return;
  }
  TRIPOD_CHECK(full.numel() == shard.numel() * tp->size(), "sp_all_gather: {} from {} x {}", full.str(),
               tp->size(), shard.str());
  Tensor f = full.view({full.numel()});
  tp->all_gather(f, shard.view({shard.numel()}))->wait();
}

void sp_reduce_scatter(comm::Communicator* tp, Tensor& shard, const Tensor& full) {
  if (!tp_active(tp)) {
    TRIPOD_CHECK(full.is_cpu(), "sp_reduce_scatter without a tp group on {}", full.str());
    if (full.raw() != shard.raw()) std::memcpy(shard.raw(), full.raw(), shard.nbytes());
    return;
  }
  TRIPOD_CHECK(full.numel() == shard.numel() * tp->size(), "sp_reduce_scatter: {} into {} x {}", full.str(),
               tp->size(), shard.str());
  Tensor s = shard.view({shard.numel()});
  tp->reduce_scatter(s, full.view({full.numel()}))->wait();
}

}  // namespace tripod::parallel
