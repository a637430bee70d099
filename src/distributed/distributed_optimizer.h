// AdamW over the data-parallel model chunks (Megatron-core's
// DistributedOptimizer in optimizer/distrib_optimizer.py, ZeRO-1, and its
// non-sharded counterpart): one class for both cases.
//
//   not sharded (default)          every dp rank holds the whole fp32 master
//                                  weights, all-reduced gradients and both
//                                  AdamW moments, and steps all of them;
//   sharded (--use-distributed-optimizer)
//                                  each dp rank holds the moments and steps
//                                  the master weights of its shard only (its
//                                  piece of every bucket, see
//                                  param_and_grad_buffer.h), on gradients
//                                  reduce-scattered into that shard, then the
//                                  updated parameters are all-gathered;
//   ZeRO-2 / ZeRO-3 (--data-parallel-sharding-strategy optim_grads[_params])
//                                  the same shard, its gradients accumulated
//                                  per micro-batch; under ZeRO-3 the shard is
//                                  the parameters at rest and nothing is
//                                  gathered after the step (docs/zero.md).
//
// Per iteration: reduce_grads() -> get_grad_norm() -> (clip) step().
// Checkpoints see the moments in full-parameter order whatever the shard
// layout (save_state() streams them from the shards one piece at a time,
// load_state()/set_state() take this rank's pieces), so the checkpoint
// format does not depend on the layout.
//
// Relates to: distributed/distributed_data_parallel.h (the buffers),
// distributed/finalize_model_grads.h, optim/adamw.h (the update),
// train/checkpointing.cpp, docs/parallelism.md (distributed optimizer).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "backend/ops.h"
#include "distributed/distributed_data_parallel.h"
#include "optim/adamw.h"
#include "parallel/groups.h"

namespace tripod::distributed {

class DistributedOptimizer {
 public:
  // Sharded when ddp.config().use_distributed_optimizer. groups: the grad
  // norm sums over mp (tp x pp), or over the world when sharded (over one
  // instance, mp x intra_dp_cp, with --num-distributed-optimizer-instances).
  DistributedOptimizer(DistributedDataParallel& ddp, const parallel::ProcessGroups& groups, backend::Backend& be,
                       const optim::AdamWConfig& config);
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  bool sharded() const { return sharded_; }

  // Makes the gradients this optimizer reads final: finalize_model_grads
  // (sequence-parallel and tied-embedding sums, the dp reduction).
  void reduce_grads();
  // Megatron's clip_grad_norm_fp32 before clipping: the L2 norm of the
  // reduced gradients (as they are: still carrying the fp16 loss scale),
  // every parameter counted once. Sharded parameters count on every tp
  // rank, replicated ones on tp rank 0 only
  // (param_is_not_tensor_parallel_duplicate), the last stage's copy of the
  // tied embedding not at all; summed over the model-parallel group, and
  // over dp too when sharded; with expert parallelism the experts' sum over
  // the ep group first (each rank holds E / ep experts). Collective;
  // synchronises with the device.
  double get_grad_norm();
  // One AdamW step at this lr on gradients x grad_scale (clip coefficient /
  // loss scale), then the compute copies (bf16/fp16) or, sharded, the
  // parameter all-gather (with --overlap-param-gather: launched here, waited
  // for per bucket by the next forward).
  void step(double lr, float grad_scale, double decoupled_lr = -1);
  int64_t steps() const;  // optimizer steps taken (bias correction), the same in every chunk

  // Elements of this rank's optimizer shard over all chunks (each moment).
  int64_t shard_numel() const;
  // The moments of a chunk as flat f32 tensors on the backend device,
  // aligned with the chunk's ParamStore::values() (gathered over dp when
  // sharded: collective). set_state is the inverse (this rank's pieces).
  std::pair<Tensor, Tensor> state(int chunk = 0);
  void set_state(int chunk, const Tensor& exp_avg, const Tensor& exp_avg_sq, int64_t steps);
  // Sharded only: set_state without whole moments. moment(p, 0 | 1) gives
  // parameter p's tp-local exp_avg | exp_avg_sq (host f32); only the
  // parameters this rank's shard overlaps are asked for, one at a time
  // (NOTE [Streamed shard load] in param_and_grad_buffer.cpp).
  void load_state(int chunk, const std::function<Tensor(const model::Param&, int)>& moment, int64_t steps);
  // A checkpoint save without whole moments or (ZeRO-3) values: for each
  // parameter of the chunk in ParamStore order, its fp32 value, exp_avg and
  // exp_avg_sq (tp-local, flat) go to write() on the rank for which
  // writes(p) holds, in pieces of at most `window` elements gathered from
  // the shards (NOTE [Streamed shard save]). Collective over the chunk's dp
  // (and edp) groups: every rank calls it, writing or not.
  void save_state(int chunk, const std::function<bool(const model::Param&)>& writes,
                  const std::function<void(const float*, int64_t)>& write, int64_t window);

 private:
  struct ChunkState {
    std::unique_ptr<optim::AdamW> adam;        // over the shard (the whole buffer unless sharded)
    std::vector<optim::Segment> segments;      // relative to the shard
    std::vector<optim::Segment> norm_segments;  // the ranges the grad norm counts, relative to the shard
    std::vector<optim::Segment> expert_norm_segments;  // not sharded, ep > 1: the experts' ranges, summed over ep
    Tensor value_shard;                        // sharded: the fp32 master weights being stepped
  };

  DistributedDataParallel& ddp_;
  parallel::ProcessGroups groups_;
  backend::Backend& be_;
  bool sharded_;
  std::vector<ChunkState> chunks_;
};

}  // namespace tripod::distributed
