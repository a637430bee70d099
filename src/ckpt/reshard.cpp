// Implementation of ckpt/reshard.h.
#include "ckpt/reshard.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace tripod::ckpt {

Tensor fit_rows(const Tensor& saved, const Shape& target, const Tensor* fill, const std::string& name) {
  if (saved.shape() == target) return saved;
  const Shape& s = saved.shape();
  bool same_tail = s.size() == target.size() && !s.empty();
  for (size_t d = 1; same_tail && d < s.size(); ++d) same_tail = s[d] == target[d];
  TRIPOD_CHECK(same_tail && (name.find("word_embeddings") != std::string::npos ||
                            name.find("output_layer") != std::string::npos),
               "checkpoint tensor {} has shape {} but the model needs {} (only the padded vocabulary may differ)",
               name, shape_str(s), shape_str(target));
  Tensor out = fill ? fill->view(target) : Tensor::zeros(target, DType::F32);
  if (fill) {  // do not write into the caller's tensor
    Tensor copy = Tensor::empty(target, DType::F32);
    std::memcpy(copy.raw(), fill->raw(), fill->nbytes());
    out = copy;
  }
  const int64_t row = saved.numel() / s[0];
  const int64_t rows = std::min(s[0], target[0]);
  std::memcpy(out.raw(), saved.raw(), static_cast<size_t>(rows * row) * sizeof(float));
  return out;
}

namespace {

Tensor full_param(const CheckpointReader& reader, const model::Param& p, uint64_t seed, float std,
                  int64_t num_layers) {
  const std::string key = "model." + p.spec.name;
  TRIPOD_CHECK_HINT(reader.has(key), "load with the model arguments the checkpoint was saved with",
                    "{}: the checkpoint has no parameter {}", reader.path(), p.spec.name);
  Tensor full = reader.read_full(key);
  if (full.shape() != p.spec.global_shape) {
    Tensor init = model::init_full(p.spec, seed, std, num_layers);
    full = fit_rows(full, p.spec.global_shape, &init, key);
  }
  return full;
}

Tensor full_moment(const CheckpointReader& reader, const model::Param& p, int moment) {
  const std::string key = std::string(moment == 0 ? "optim.exp_avg." : "optim.exp_avg_sq.") + p.spec.name;
  TRIPOD_CHECK_HINT(reader.has(key), "pass --no-load-optim (or --finetune) to start a fresh optimizer",
                    "{}: the checkpoint has no optimizer state for {}", reader.path(), p.spec.name);
  return fit_rows(reader.read_full(key), p.spec.global_shape, nullptr, key);
}

}  // namespace

Tensor param_value(const CheckpointReader& reader, const model::ParamStore& store, const model::Param& p,
                   uint64_t seed, float std, int64_t num_layers) {
  return model::take_shard(full_param(reader, p, seed, std, num_layers), p.spec.shard, store.tp_size(),
                           store.tp_rank());
}

Tensor moment_value(const CheckpointReader& reader, const model::ParamStore& store, const model::Param& p,
                    int moment) {
  return model::take_shard(full_moment(reader, p, moment), p.spec.shard, store.tp_size(), store.tp_rank());
}

void load_params(const CheckpointReader& reader, model::ParamStore& store, uint64_t seed, float std,
                 int64_t num_layers) {
  for (auto& p : store.params()) {
    store.set_from_full(p, full_param(reader, p, seed, std, num_layers));
  }
}

void load_optimizer_moments(const CheckpointReader& reader, const model::ParamStore& store, Tensor& exp_avg,
                            Tensor& exp_avg_sq) {
  TRIPOD_CHECK(exp_avg.is_cpu() && exp_avg_sq.is_cpu() && exp_avg.numel() >= store.numel() &&
                   exp_avg_sq.numel() == exp_avg.numel(),
               "optimizer buffers must be host f32 of at least {} elements", store.numel());
  for (auto* t : {&exp_avg, &exp_avg_sq}) {
    const bool first = t == &exp_avg;
    std::memset(t->raw(), 0, t->nbytes());
    for (const auto& p : store.params()) {
      Tensor part = moment_value(reader, store, p, first ? 0 : 1);
      std::memcpy(t->data<float>() + p.offset, part.raw(), part.nbytes());
    }
  }
}

}  // namespace tripod::ckpt
