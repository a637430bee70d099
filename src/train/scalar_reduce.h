// All-reduce of host values (one scalar, or a few) over a group, through a
// tensor on the backend's device (the communicator's device: host for Gloo,
// GPU for NCCL). Used for the loss, the exit-signal flag, checkpoint
// agreement and the MoE step's loads. A null group or a group of one leaves
// the values unchanged.
#pragma once

#include <algorithm>
#include <vector>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace tripod::train {

// The values of `v` reduced in place, element by element, in one call.
template <typename T>
void all_reduce_values(comm::Communicator* group, backend::Backend& be, std::vector<T>& v,
                       comm::ReduceOp op = comm::ReduceOp::Sum) {
  if (!group || group->size() == 1 || v.empty()) return;
  Tensor h = Tensor::empty({static_cast<int64_t>(v.size())}, dtype_of<T>());
  std::copy(v.begin(), v.end(), h.data<T>());
  Tensor d = be.empty(h.shape(), h.dtype());
  be.copy(d, h);
  comm::AllReduceOptions o;
  o.op = op;
  group->all_reduce(d, o)->wait();
  be.copy(h, d);
  be.synchronize();
  std::copy(h.data<T>(), h.data<T>() + h.numel(), v.begin());
}

template <typename T>
T all_reduce_scalar(comm::Communicator* group, backend::Backend& be, T value,
                    comm::ReduceOp op = comm::ReduceOp::Sum) {
  std::vector<T> v{value};
  all_reduce_values(group, be, v, op);
  return v[0];
}

}  // namespace tripod::train
