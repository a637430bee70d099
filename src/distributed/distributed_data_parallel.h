// Data parallelism over this rank's model chunks (Megatron-core's
// DistributedDataParallel in distributed/distributed_data_parallel.py): one
// ParamAndGradBuffer per chunk, whose buckets are reduced over the
// data-parallel group (with expert parallelism the experts' buckets over
// edp: NOTE [Expert buckets] in param_and_grad_buffer.h), with --overlap-grad-reduce during the last
// micro-batch's backward (the backward hooks below), and, with the
// distributed optimizer and --overlap-param-gather, the updated parameters
// all-gathered per bucket as the next forward needs them.
//
// Per iteration (driven by the trainer and finalize_model_grads):
//   zero_grad_buffer()                 grads to zero, every bucket pending
//   grad_ready_hook() during backward  complete buckets start reducing
//   start_grad_sync(), finish_grad_sync()  the rest, then wait for all
//   (optimizer step: distributed_optimizer.h starts the param sync)
//   param_use_hook() during forward    waits for the buckets a forward reads
//
// With TP = PP = DP = 1 every call is a no-op or a plain loop.
//
// ZeRO-2/-3 (--data-parallel-sharding-strategy optim_grads[_params],
// docs/zero.md) replace the two hooks by the model's ParamGatherer
// (ShardedParamGatherer below), called on every micro-batch.
//
// Relates to: distributed/param_and_grad_buffer.h (buckets, shard layout),
// distributed/finalize_model_grads.h (the reductions before the optimizer),
// train/pipeline_stage.h (where the hooks are called), docs/parallelism.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "distributed/param_and_grad_buffer.h"
#include "model/gpt_model.h"
#include "parallel/groups.h"

namespace tripod::distributed {

// What data parallelism shards over the dp group (Megatron-FSDP's
// --data-parallel-sharding-strategy; docs/zero.md):
//   NoShard           every rank holds everything (plain DDP)
//   Optim             the optimizer state (ZeRO-1, --use-distributed-optimizer)
//   OptimGrads        and the gradients (ZeRO-2): each bucket reduce-scattered
//                     after every micro-batch's backward into the fp32 shard
//   OptimGradsParams  and the parameters (ZeRO-3): gathered per layer for use
enum class ShardingStrategy : uint8_t { NoShard, Optim, OptimGrads, OptimGradsParams };
const char* sharding_strategy_name(ShardingStrategy s);  // Megatron's spelling
// The strategy from the flags as given (strategy: "" when not given); throws
// with the flag to change on contradictions.
ShardingStrategy resolve_sharding_strategy(const std::string& strategy, bool use_megatron_fsdp,
                                           bool use_distributed_optimizer);

// Megatron's DistributedDataParallelConfig (the subset tripod has).
struct DistributedDataParallelConfig {
  bool overlap_grad_reduce = false;        // --overlap-grad-reduce
  bool overlap_param_gather = false;       // --overlap-param-gather (needs the distributed optimizer)
  bool use_distributed_optimizer = false;  // --use-distributed-optimizer: buffers sharded over dp
  int64_t bucket_size = 0;                 // --ddp-bucket-size; 0: Megatron's default (with overlap only)
  // Resolved from --data-parallel-sharding-strategy, --use-megatron-fsdp and
  // --use-distributed-optimizer (TrainArgs::finalize); Optim and above set
  // use_distributed_optimizer too.
  ShardingStrategy sharding = ShardingStrategy::NoShard;
  // --num-distributed-optimizer-instances: shard within each of N runs of dp
  // ranks, replicate across them (NOTE [Distributed-optimizer instances] in
  // parallel/groups.h; needs the distributed optimizer when N > 1).
  int num_distributed_optimizer_instances = 1;
  // The dtype the data-parallel gradient reduction moves (NOTE [bf16
  // gradient communication]): F32, or BF16 with --grad-reduce-in-bf16 /
  // --megatron-fsdp-grad-comm-dtype bf16 (resolved by TrainArgs::finalize).
  DType grad_comm_dtype = DType::F32;
  bool shards_grads() const { return sharding >= ShardingStrategy::OptimGrads; }
  bool shards_params() const { return sharding == ShardingStrategy::OptimGradsParams; }
};

class DistributedDataParallel;

// ZeRO-2 and -3: the model's ParamGatherer (model/param_gatherer.h) for one
// chunk, over its buffer's buckets (docs/zero.md):
//   before(g, Forward|Backward)  ZeRO-3: waits for the all-gather of group
//                                g's buckets (launching it if the prefetch
//                                did not), then, with --overlap-param-gather,
//                                launches the next group's (g + 1 in
//                                forward, g - 1 in backward): the prefetch;
//                                Backward: gives g's buckets zeroed
//                                gradient buffers (ParamAndGradBuffer::bind_grads)
//   after(g, ...)                ZeRO-3: frees g's gathered parameters
//   grads_written(g)             register_grad_ready: complete buckets
//                                start their reduce-scatter (every micro-batch)
class ShardedParamGatherer final : public model::ParamGatherer {
 public:
  ShardedParamGatherer(DistributedDataParallel& ddp, int chunk);
  void before(int group, Pass pass) override;
  void after(int group, Pass pass) override;
  void grads_written(int group) override;

 private:
  DistributedDataParallel& ddp_;
  int chunk_;
  std::vector<std::vector<size_t>> buckets_of_group_;
};

class DistributedDataParallel {
 public:
  // (chunk, indices of parameters in the chunk's ParamStore order)
  using ParamHook = std::function<void(int chunk, const std::vector<size_t>& params)>;

  // chunks: this rank's model chunks (virtual pipeline stages), not owned;
  // groups: this rank's process groups (dp for the buckets, tp for the
  // sequence-parallel LayerNorm grads in the backward hook).
  DistributedDataParallel(std::vector<model::GptModel*> chunks, const parallel::ProcessGroups& groups,
                          backend::Backend& be, const DistributedDataParallelConfig& config);
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  model::GptModel& model(int chunk) { return *chunks_.at(static_cast<size_t>(chunk)); }
  ParamAndGradBuffer& buffer(int chunk) { return *buffers_.at(static_cast<size_t>(chunk)); }
  const ParamAndGradBuffer& buffer(int chunk) const { return *buffers_.at(static_cast<size_t>(chunk)); }
  const DistributedDataParallelConfig& config() const { return config_; }
  int dp_size() const { return dp_size_; }
  // The group the buffers shard over: dp (dp x cp), or one
  // distributed-optimizer instance of it (intra_dp_cp).
  comm::Communicator& shard_group() { return *shard_group_; }
  // The overlap flags in effect (both need dp > 1).
  bool overlap_grad_reduce() const { return config_.overlap_grad_reduce && dp_size_ > 1; }
  bool overlap_param_gather() const { return config_.overlap_param_gather && dp_size_ > 1; }
  // Megatron's DDP: without overlap the bucket size is infinite (one bucket
  // per chunk, reduced after the backward); with it, --ddp-bucket-size or
  // max(4e7, 1e6 x dp) elements. 0: one bucket per chunk. ZeRO-2/-3:
  // --ddp-bucket-size, 0: one bucket per parameter group (layer).
  int64_t bucket_size() const;

  // Start of an iteration: zero gradients, every bucket pending again.
  void zero_grad_buffer();
  // For GptPipelineStage::set_param_hooks: gradients final (empty without
  // overlap of the grad reduce), parameters about to be read by a forward
  // (empty without overlap of the param gather).
  ParamHook grad_ready_hook();
  ParamHook param_use_hook();
  // A group of a chunk's parameters has final gradients (the body of
  // grad_ready_hook): sequence-parallel LayerNorm grads are summed over tp
  // right here (every tp rank reaches the same hook in the same order), then
  // the buckets that became complete start their dp reduction.
  void register_grad_ready(int chunk, const std::vector<size_t>& params);
  // Launches every bucket not launched yet (without overlap: all of them;
  // with it: the deferred embedding bucket), chunk by chunk; then waits.
  // Nothing to do with dp 1 and no distributed optimizer.
  void start_grad_sync();
  void finish_grad_sync();
  // --overlap-param-gather: waits for every outstanding parameter
  // all-gather. Call before reading parameter values outside a forward
  // (checkpoints, dumps); forwards wait per bucket themselves.
  void finish_param_sync();

  // ZeRO-2/-3 (config().shards_grads()): the gatherer the trainer hands to
  // chunk c's model (GptModel::set_param_gatherer); null otherwise.
  model::ParamGatherer* param_gatherer(int chunk);
  // ZeRO-3: whole parameters in every chunk's ParamStore (checkpoints,
  // weight dumps; collective over dp), and back to shards (take_back: after a
  // load wrote new values). No-ops for the other strategies.
  void materialize_params();
  void unmaterialize_params(bool take_back);
  // ZeRO-3 with models built without flat values (StageConfig::flat_values
  // false): each chunk's shard of the initial parameters (NOTE [Sharded init]).
  void init_params_sharded(uint64_t seed, float std, int64_t num_layers);

  // The buckets for the start-up log: count and sizes in launch order per chunk.
  std::string describe_buckets() const;

 private:
  std::vector<model::GptModel*> chunks_;
  parallel::ProcessGroups groups_;
  DistributedDataParallelConfig config_;
  int dp_size_ = 1;
  std::shared_ptr<comm::Communicator> shard_group_;
  std::vector<std::unique_ptr<ParamAndGradBuffer>> buffers_;
  std::vector<std::unique_ptr<ShardedParamGatherer>> gatherers_;  // per chunk, ZeRO-2/-3
};

}  // namespace tripod::distributed
