// Where the GPT layers meet the tensor-parallel group: Megatron's f/g
// conjugate pairs (parallel/tp_regions.h) applied around column- and
// row-parallel linears, with or without sequence parallelism. Internal to
// model/. With tp size 1 every call returns its input: no copies.
//
//   column-parallel in : enter()        = copy_to_tp_region | gather_from_sp_region
//   row-parallel out   : exit()         = reduce_from_tp_region | reduce_scatter_to_sp_region
//   and their backwards: enter_backward(), exit_backward().
#pragma once

#include "comm/communicator.h"
#include "parallel/tp_regions.h"
#include "tensor/tensor.h"

namespace tripod::model {

struct TpPoints {
  comm::Communicator* tp = nullptr;
  bool sp = false;  // sequence parallel (only when tp is active)

  bool active() const { return parallel::tp_active(tp); }
  // x (N_sp or N, C) -> input of a column-parallel linear (N, C).
  const Tensor& enter(const Tensor& x, Tensor& full_buf) const {
    if (!sp) return x;
    parallel::sp_all_gather(tp, full_buf, x);
    return full_buf;
  }
  // dfull (N, C) partial sums over tp -> d x (N_sp or N, C). May reduce in place.
  const Tensor& enter_backward(Tensor& dfull, Tensor& shard_buf) const {
    if (sp) {
      parallel::sp_reduce_scatter(tp, shard_buf, dfull);
      return shard_buf;
    }
    parallel::tp_all_reduce(tp, dfull);
    return dfull;
  }
  // partial (N, C) output of a row-parallel linear -> (N_sp or N, C) sum.
  Tensor& exit(Tensor& partial, Tensor& shard_buf) const {
    if (sp) {
      parallel::sp_reduce_scatter(tp, shard_buf, partial);
      return shard_buf;
    }
    parallel::tp_all_reduce(tp, partial);
    return partial;
  }
  // d out (N_sp or N, C) -> gradient of the row-parallel output (N, C).
  const Tensor& exit_backward(const Tensor& dout, Tensor& full_buf) const {
    if (!sp) return dout;
    parallel::sp_all_gather(tp, full_buf, dout);
    return full_buf;
  }
};

}  // namespace tripod::model
