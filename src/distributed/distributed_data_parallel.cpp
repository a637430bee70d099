// Implementation of distributed/distributed_data_parallel.h.
#include "distributed/distributed_data_parallel.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.h"
#include "parallel/tp_regions.h"

namespace tripod::distributed {

const char* sharding_strategy_name(ShardingStrategy s) {
  switch (s) {
    case ShardingStrategy::NoShard: return "no_shard";
    case ShardingStrategy::Optim: return "optim";
    case ShardingStrategy::OptimGrads: return "optim_grads";
    case ShardingStrategy::OptimGradsParams: return "optim_grads_params";
  }
  return "?";
}

// Megatron reads --data-parallel-sharding-strategy only under
// --use-megatron-fsdp (whose default is optim_grads_params) and turns the
// distributed optimizer on for it. tripod has one data-parallel code path,
// so the strategy also works alone, and --use-distributed-optimizer is its
// "optim" spelling.
ShardingStrategy resolve_sharding_strategy(const std::string& strategy, bool use_megatron_fsdp,
                                           bool use_distributed_optimizer) {
  if (strategy.empty()) {
    if (use_megatron_fsdp) return ShardingStrategy::OptimGradsParams;
    return use_distributed_optimizer ? ShardingStrategy::Optim : ShardingStrategy::NoShard;
  }
  for (auto s : {ShardingStrategy::NoShard, ShardingStrategy::Optim, ShardingStrategy::OptimGrads,
                 ShardingStrategy::OptimGradsParams}) {
    if (strategy != sharding_strategy_name(s)) continue;
    TRIPOD_CHECK_HINT(!(s == ShardingStrategy::NoShard && use_distributed_optimizer),
                      "drop --use-distributed-optimizer, or pass --data-parallel-sharding-strategy optim (or more)",
                      "--use-distributed-optimizer shards the optimizer state, which contradicts "
                      "--data-parallel-sharding-strategy no_shard");
    return s;
  }
  throw Error(fmt::format("--data-parallel-sharding-strategy {} is not one of no_shard, optim, optim_grads, "
                          "optim_grads_params", strategy),
              "use optim (ZeRO-1), optim_grads (ZeRO-2) or optim_grads_params (ZeRO-3)");
}
DistributedDataParallel::DistributedDataParallel(std::vector<model::GptModel*> chunks,
                                                 const parallel::ProcessGroups& groups, backend::Backend& be,
                                                 const DistributedDataParallelConfig& config)
    : chunks_(std::move(chunks)), groups_(groups), config_(config) {
  TRIPOD_CHECK(groups_.dp, "DistributedDataParallel needs a data-parallel group");
  dp_size_ = groups_.dp->size();
  shard_group_ = groups_.dp;
  if (config_.num_distributed_optimizer_instances > 1) {
    TRIPOD_CHECK_HINT(config_.use_distributed_optimizer,
                      "add --use-distributed-optimizer (or a --data-parallel-sharding-strategy that shards), or "
                      "drop --num-distributed-optimizer-instances",
                      "--num-distributed-optimizer-instances {} needs the distributed optimizer",
                      config_.num_distributed_optimizer_instances);
    TRIPOD_CHECK(groups_.intra_dp_cp && groups_.inter_dist_opt,
                 "--num-distributed-optimizer-instances {}: the instance groups were not made "
                 "(parallel::make_distributed_optimizer_instance_groups)",
                 config_.num_distributed_optimizer_instances);
    shard_group_ = groups_.intra_dp_cp;
  }
  // NOTE [Expert buckets] (param_and_grad_buffer.h): each rank holds its ep
  // rank's experts only, reduced (and sharded) over edp.
  comm::Communicator* expert_dp = groups_.layout.ep > 1 ? groups_.edp.get() : nullptr;
  TRIPOD_CHECK(groups_.layout.ep == 1 || expert_dp,
               "--expert-model-parallel-size {}: the expert-data-parallel group was not made", groups_.layout.ep);
  TRIPOD_CHECK_HINT(!expert_dp || config_.num_distributed_optimizer_instances == 1,
                    "drop --num-distributed-optimizer-instances, or --expert-model-parallel-size",
                    "--num-distributed-optimizer-instances {} with --expert-model-parallel-size {} is not in this "
                    "version yet", config_.num_distributed_optimizer_instances, groups_.layout.ep);
  const bool pipeline = groups_.layout.pp > 1;
  for (model::GptModel* m : chunks_) {
    auto& params = m->params();
    // NOTE [Deferred embedding bucket]: the tied word embedding's gradient
    // is summed over the embedding group (first and last stage) before the
    // dp reduction, at the end of the iteration (finalize_model_grads), so
    // with overlap it gets a bucket of its own that only start_grad_sync launches.
    // ZeRO-2/-3 reduce every micro-batch, so the embedding is deferred there too.
    const bool per_microbatch = config_.shards_grads();
    std::vector<bool> deferred;
    for (const auto& p : params.params())
      deferred.push_back((overlap_grad_reduce() || per_microbatch) && pipeline &&
                         p.spec.role == model::ParamRole::WordEmbeddings);
    // ZeRO-2/-3: buckets never straddle two parameter groups (layers), so
    // each layer's are gathered, bound and reduced on their own; with
    // --ddp-bucket-size a layer may be cut further.
    std::vector<int> group_of(params.params().size(), -1);
    const auto& pg = m->param_groups();
    for (size_t g = 0; g < pg.size(); ++g)
      for (size_t i : pg[g]) group_of[i] = static_cast<int>(g);
    const int64_t size = bucket_size();
    buffers_.push_back(std::make_unique<ParamAndGradBuffer>(
        params, *shard_group_, be, size, config_.use_distributed_optimizer, deferred, per_microbatch,
        config_.shards_params(), per_microbatch ? &group_of : nullptr, expert_dp));
    if (config_.num_distributed_optimizer_instances > 1) buffers_.back()->set_inter_instance_group(groups_.inter_dist_opt.get());
    buffers_.back()->set_grad_comm_dtype(config_.grad_comm_dtype);
  }
  if (config_.shards_grads())
    for (int c = 0; c < num_chunks(); ++c) gatherers_.push_back(std::make_unique<ShardedParamGatherer>(*this, c));
}

// ---- ShardedParamGatherer ----

ShardedParamGatherer::ShardedParamGatherer(DistributedDataParallel& ddp, int chunk) : ddp_(ddp), chunk_(chunk) {
  const auto& groups = ddp_.model(chunk).param_groups();
  const ParamAndGradBuffer& buf = ddp_.buffer(chunk);
  for (const auto& g : groups) {
    std::vector<size_t> bs;
    for (size_t i : g) {
      const size_t b = static_cast<size_t>(buf.bucket_of(i));
      if (std::find(bs.begin(), bs.end(), b) == bs.end()) bs.push_back(b);
    }
    buckets_of_group_.push_back(std::move(bs));
  }
}

void ShardedParamGatherer::before(int group, Pass pass) {
  ParamAndGradBuffer& buf = ddp_.buffer(chunk_);
  const auto& mine = buckets_of_group_.at(static_cast<size_t>(group));
  if (buf.shards_params()) {
    for (size_t b : mine) buf.wait_gather_params(b);
    const int next = pass == Pass::Forward ? group + 1 : group - 1;
    if (ddp_.overlap_param_gather() && next >= 0 && next < static_cast<int>(buckets_of_group_.size()))
      for (size_t b : buckets_of_group_[static_cast<size_t>(next)]) buf.start_gather(b);
  }
  if (pass == Pass::Backward)
    for (size_t b : mine) buf.bind_grads(b);
}

void ShardedParamGatherer::after(int group, Pass) {
  ParamAndGradBuffer& buf = ddp_.buffer(chunk_);
  if (!buf.shards_params()) return;
  for (size_t b : buckets_of_group_.at(static_cast<size_t>(group))) buf.release_params(b);
}

void ShardedParamGatherer::grads_written(int group) {
  ddp_.register_grad_ready(chunk_, ddp_.model(chunk_).param_groups().at(static_cast<size_t>(group)));
}

model::ParamGatherer* DistributedDataParallel::param_gatherer(int chunk) {
  return gatherers_.empty() ? nullptr : gatherers_.at(static_cast<size_t>(chunk)).get();
}

void DistributedDataParallel::materialize_params() {
  for (auto& b : buffers_) b->materialize_params();
}

void DistributedDataParallel::init_params_sharded(uint64_t seed, float std, int64_t num_layers) {
  for (auto& b : buffers_) b->init_shard(seed, std, num_layers);
}

void DistributedDataParallel::unmaterialize_params(bool take_back) {
  for (auto& b : buffers_) b->unmaterialize_params(take_back);
}

DistributedDataParallel::~DistributedDataParallel() = default;

int64_t DistributedDataParallel::bucket_size() const {
  if (config_.shards_grads()) return std::max<int64_t>(config_.bucket_size, 0);  // else one per parameter group
  if (!overlap_grad_reduce()) return 0;
  return config_.bucket_size > 0 ? config_.bucket_size : default_bucket_size(dp_size_);
}

void DistributedDataParallel::zero_grad_buffer() {
  for (size_t c = 0; c < chunks_.size(); ++c) {
    chunks_[c]->params().zero_grad();
    buffers_[c]->reset();
  }
}

DistributedDataParallel::ParamHook DistributedDataParallel::grad_ready_hook() {
  if (!overlap_grad_reduce() || config_.shards_grads()) return {};  // ZeRO-2/-3: the gatherer reports
  return [this](int c, const std::vector<size_t>& p) { register_grad_ready(c, p); };
}

DistributedDataParallel::ParamHook DistributedDataParallel::param_use_hook() {
  if (!overlap_param_gather() || config_.shards_params()) return {};
  return [this](int c, const std::vector<size_t>& p) { buffer(c).finish_param_sync(p); };
}

void DistributedDataParallel::register_grad_ready(int chunk, const std::vector<size_t>& params) {
  model::GptModel& m = model(chunk);
  for (size_t i : params) {
    model::Param& p = m.params().params()[i];
    if (m.has_partial_sp_grad(p)) parallel::tensor_model_parallel_all_reduce(groups_.tp.get(), p.grad);
  }
  buffer(chunk).register_grad_ready(params);
}

void DistributedDataParallel::start_grad_sync() {
  if (dp_size_ == 1 && !config_.use_distributed_optimizer) return;
  // The loss is already scaled by 1/dp: the sum over dp is the average.
  for (size_t c = 0; c < buffers_.size(); ++c) {
    TRIPOD_CHECK(!overlap_grad_reduce() || config_.shards_grads() || buffers_[c]->all_grads_ready(),
                 "model chunk {}: the backward did not report every parameter's gradient as final", c);
    buffers_[c]->start_grad_sync();
  }
}

void DistributedDataParallel::finish_grad_sync() {
  for (auto& b : buffers_) b->finish_grad_sync();
}

void DistributedDataParallel::finish_param_sync() {
  for (auto& b : buffers_) b->finish_param_sync();
}

std::string DistributedDataParallel::describe_buckets() const {
  std::string sizes;
  for (size_t c = 0; c < buffers_.size(); ++c) {
    const auto& b = buffers_[c]->buckets();
    sizes += fmt::format("{}chunk {}: {} bucket{} [", c ? "; " : "", c, b.size(), b.size() == 1 ? "" : "s");
    for (size_t k = 0; k < b.size(); ++k) sizes += fmt::format("{}{}", k ? " " : "", b[k].numel());
    sizes += "]";
  }
  return sizes;
}

}  // namespace tripod::distributed
