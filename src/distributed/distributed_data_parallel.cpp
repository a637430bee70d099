// Implementation of distributed/distributed_data_parallel.h.
#include "distributed/distributed_data_parallel.h"

#include <fmt/format.h>

#include "base/error.h"
#include "parallel/tp_regions.h"

namespace tripod::distributed {
DistributedDataParallel::DistributedDataParallel(std::vector<model::GptModel*> chunks,
                                                 const parallel::ProcessGroups& groups, backend::Backend& be,
                                                 const DistributedDataParallelConfig& config)
    : chunks_(std::move(chunks)), groups_(groups), config_(config) {
  TRIPOD_CHECK(groups_.dp, "DistributedDataParallel needs a data-parallel group");
  dp_size_ = groups_.dp->size();
  const bool pipeline = groups_.layout.pp > 1;
  for (model::GptModel* m : chunks_) {
    auto& params = m->params();
    // NOTE [Deferred embedding bucket]: the tied word embedding's gradient
    // is summed over the embedding group (first and last stage) before the
    // dp reduction, at the end of the iteration (finalize_model_grads), so
    // with overlap it gets a bucket of its own that only start_grad_sync launches.
    std::vector<bool> deferred;
    for (const auto& p : params.params())
      deferred.push_back(overlap_grad_reduce() && pipeline && p.spec.role == model::ParamRole::WordEmbeddings);
    buffers_.push_back(std::make_unique<ParamAndGradBuffer>(params, *groups_.dp, be, bucket_size(),
                                                            config_.use_distributed_optimizer, deferred));
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

int64_t DistributedDataParallel::bucket_size() const {
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
  if (!overlap_grad_reduce()) return {};
  return [this](int c, const std::vector<size_t>& p) { register_grad_ready(c, p); };
}

DistributedDataParallel::ParamHook DistributedDataParallel::param_use_hook() {
  if (!overlap_param_gather()) return {};
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
    TRIPOD_CHECK(!overlap_grad_reduce() || buffers_[c]->all_grads_ready(),
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
