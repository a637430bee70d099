// All-reduce of one host scalar over a group, through a 1-element tensor on
// the backend's device (the communicator's device: host for Gloo, GPU for
// NCCL). Used for the loss, the exit-signal flag and checkpoint agreement.
// A null group or a group of one returns the value unchanged.
#pragma once

#include "backend/ops.h"
#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace tripod::train {

template <typename T>
T all_reduce_scalar(comm::Communicator* group, backend::Backend& be, T value,
                    comm::ReduceOp op = comm::ReduceOp::Sum) {
  if (!group || group->size() == 1) return value;
  Tensor h = Tensor::empty({1}, dtype_of<T>());
  h.data<T>()[0] = value;
  Tensor d = be.empty({1}, dtype_of<T>());
  be.copy(d, h);
  comm::AllReduceOptions o;
  o.op = op;
  group->all_reduce(d, o)->wait();
  be.copy(h, d);
  be.synchronize();
  return h.data<T>()[0];
}

}  // namespace tripod::train
