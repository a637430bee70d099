// Implementation of model/param_table.h.
#include "model/param_table.h"

#include <cmath>
#include <cstring>

#include "backend/philox.h"
#include "base/debug_config.h"
#include "base/error.h"

namespace tripod::model {
namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Splits dim 0 or dim 1 of a 1-D/2-D tensor into tp chunks and copies chunk
// `rank` between `full` and `part` (to_part: full -> part).
// QkvGroups: full (G, k+2, HS[, C]) -> part [Q_tp | K_tp | V_tp] of the
// rank's G/tp groups (see ShardDim), or back.
void copy_qkv_groups(const Tensor& full, const Tensor& part, int tp, int rank, bool to_part) {
  const int64_t G = full.size(0), kk = full.size(1), hs = full.size(2), k = kk - 2;
  const int64_t cols = full.dim() > 3 ? full.size(3) : 1, G_tp = G / tp;
  float* f = const_cast<float*>(full.data<float>());
  float* q = const_cast<float*>(part.data<float>());
  const size_t head_bytes = static_cast<size_t>(hs * cols) * sizeof(float);
  for (int64_t gl = 0; gl < G_tp; ++gl) {
    const int64_t g = rank * G_tp + gl;
    for (int64_t j = 0; j < kk; ++j) {
      const int64_t part_head = j < k ? gl * k + j : (j == k ? G_tp * k + gl : G_tp * (k + 1) + gl);
      float* fr = f + (g * kk + j) * hs * cols;
      float* pr = q + part_head * hs * cols;
      if (to_part) std::memcpy(pr, fr, head_bytes);
      else std::memcpy(fr, pr, head_bytes);
    }
  }
}

void copy_chunk(const Tensor& full, const Tensor& part, ShardDim shard, int tp, int rank, bool to_part) {
  if (shard == ShardDim::QkvGroups) return copy_qkv_groups(full, part, tp, rank, to_part);
  const float* src_base = to_part ? full.data<float>() : part.data<float>();
  float* dst_base = to_part ? part.data<float>() : full.data<float>();
  const int64_t rows = full.size(0), cols = full.dim() > 1 ? full.size(1) : 1;
  auto copy_rows = [&](int64_t full_row0, int64_t part_row0, int64_t nrows) {
    const float* s = to_part ? src_base + full_row0 * cols : src_base + part_row0 * cols;
    float* d = to_part ? dst_base + part_row0 * cols : dst_base + full_row0 * cols;
    std::memcpy(d, s, static_cast<size_t>(nrows * cols) * sizeof(float));
  };
  switch (shard) {
    case ShardDim::None:
      copy_rows(0, 0, rows);
      break;
    case ShardDim::Rows: {
      const int64_t r = rows / tp;
      copy_rows(rank * r, 0, r);
      break;
    }
    case ShardDim::QkvRows: case ShardDim::GluRows: {
      const int64_t parts = shard == ShardDim::QkvRows ? 3 : 2, part_rows = rows / parts, r = part_rows / tp;
      for (int64_t k = 0; k < parts; ++k) copy_rows(k * part_rows + rank * r, k * r, r);
      break;
    }
    case ShardDim::QkvGroups: break;  // copy_qkv_groups
    case ShardDim::Cols: {
      const int64_t c = cols / tp;
      for (int64_t i = 0; i < rows; ++i) {
        float* fr = (to_part ? const_cast<float*>(src_base) : dst_base) + i * cols + rank * c;
        float* pr = (to_part ? dst_base : const_cast<float*>(src_base)) + i * c;
        if (to_part) std::memcpy(pr, fr, static_cast<size_t>(c) * sizeof(float));
        else std::memcpy(fr, pr, static_cast<size_t>(c) * sizeof(float));
      }
      break;
    }
  }
}

}  // namespace

Shape local_shape(const ParamSpec& spec, int tp) {
  Shape s = spec.global_shape;
  auto split = [&](size_t d, int64_t parts) {
    TRIPOD_CHECK(d < s.size() && s[d] % parts == 0,
                 "parameter {} of shape {} cannot be split in {} tensor-parallel shards", spec.name,
                 shape_str(spec.global_shape), parts);
    s[d] /= parts;
  };
  if (spec.shard == ShardDim::Rows) split(0, tp);
  if (spec.shard == ShardDim::Cols) split(1, tp);
  if (spec.shard == ShardDim::QkvRows) split(0, 3 * static_cast<int64_t>(tp)), s[0] *= 3;
  if (spec.shard == ShardDim::GluRows) split(0, 2 * static_cast<int64_t>(tp)), s[0] *= 2;
  if (spec.shard == ShardDim::QkvGroups) {
    TRIPOD_CHECK(s.size() >= 3 && s.size() <= 4, "parameter {} of shape {}: grouped qkv needs (G, k+2, HS[, C])",
                 spec.name, shape_str(spec.global_shape));
    split(0, tp);
    Shape flat{s[0] * s[1] * s[2]};
    if (s.size() == 4) flat.push_back(s[3]);
    s = flat;
  }
  return s;
}

Tensor take_shard(const Tensor& full, ShardDim shard, int tp, int rank) {
  ParamSpec tmp{"(shard)", full.shape(), shard};
  Tensor part = Tensor::empty(local_shape(tmp, tp), DType::F32);
  copy_chunk(full, part, shard, tp, rank, true);
  return part;
}

void place_shard(Tensor& full, const Tensor& part, ShardDim shard, int tp, int rank) {
  copy_chunk(full, part, shard, tp, rank, false);
}

Tensor init_full(const ParamSpec& spec, uint64_t seed, float std, int64_t num_layers) {
  Tensor t = Tensor::empty(spec.global_shape, DType::F32);
  float* x = t.data<float>();
  const int64_t n = t.numel();
  if (spec.init == InitKind::Zeros || spec.init == InitKind::Ones) {
    const float v = spec.init == InitKind::Ones ? 1.f : 0.f;
    for (int64_t i = 0; i < n; ++i) x[i] = v;
    return t;
  }
  // Megatron's scaled init for output projections: std / sqrt(2 L).
  const double sigma = spec.init == InitKind::ScaledNormal
                           ? std / std::sqrt(2.0 * static_cast<double>(num_layers))
                           : static_cast<double>(std);
  const uint64_t key = backend::mix64(seed, fnv1a(spec.name));
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {  // Box-Muller on two counter-based uniforms
    const double u1 = 1.0 - backend::uniform01(key, 2 * static_cast<uint64_t>(i));
    const double u2 = backend::uniform01(key, 2 * static_cast<uint64_t>(i) + 1);
    x[i] = static_cast<float>(sigma * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }
  return t;
}

ParamStore::ParamStore(std::vector<ParamSpec> specs, int tp_size, int tp_rank, backend::Backend& be,
                       int64_t pad_multiple, DType compute_dtype, bool flat_grads, bool flat_values)
    : compute_dtype_(compute_dtype), tp_size_(tp_size), tp_rank_(tp_rank), be_(be) {
  TRIPOD_CHECK(compute_dtype == DType::F32 || compute_dtype == DType::BF16 || compute_dtype == DType::F16,
               "parameter compute dtype must be f32, bf16 or f16");
  for (auto& spec : specs) {
    Param p;
    p.shape = local_shape(spec, tp_size);
    p.offset = numel_;
    numel_ += shape_numel(p.shape);
    p.spec = std::move(spec);
    index_[p.spec.name] = params_.size();
    params_.push_back(std::move(p));
  }
  padded_numel_ = (numel_ + pad_multiple - 1) / pad_multiple * pad_multiple;
  // NOTE [fp32 LayerNorm params]: LayerNorm gains start at 1.0, where a bf16
  // step is 2^-8..2^-7: Adam's early updates (~lr per step) stay below half
  // a step for tens of iterations, so a bf16 copy of the gains barely moves
  // while the fp32 masters do, and bf16 trained measurably behind fp32 on
  // KJV. The LayerNorms therefore compute with the fp32 masters (as PyTorch
  // autocast does; a few KB per layer, LN kernels take f32 weights).
  // TRIPOD_LN_PARAMS_IN_COMPUTE_DTYPE=1 restores the cast copy (Megatron's
  // choice), for before/after runs.
  ln_cast_ = debug_config().ln_params_in_compute_dtype;
  allocate_flat(flat_values, flat_grads);
}

void ParamStore::allocate_flat(bool values, bool grads) {
  const int64_t padded = padded_numel_;
  if (values) {
    values_ = be_.empty({padded}, DType::F32);
    be_.zero(values_);
    compute_values_ = values_;
    if (compute_dtype_ != DType::F32) {
      compute_values_ = be_.empty({padded}, compute_dtype_);
      be_.zero(compute_values_);
    }
    bind_values(0, padded, values_, compute_values_);
  }
  if (grads) {
    grads_ = be_.empty({padded}, DType::F32);
    be_.zero(grads_);
    bind_grads(0, padded, grads_);
  }
}

void ParamStore::release_flat(bool values, bool grads) {
  if (values) {
    bind_values(0, padded_numel_, Tensor(), Tensor());
    values_ = compute_values_ = Tensor();
  }
  if (grads) {
    bind_grads(0, padded_numel_, Tensor());
    grads_ = Tensor();
  }
}

void ParamStore::bind_values(int64_t begin, int64_t numel, const Tensor& values, const Tensor& compute) {
  const Tensor& comp = compute_dtype_ == DType::F32 ? values : compute;
  for (auto& p : params_) {
    if (p.offset < begin || p.offset + shape_numel(p.shape) > begin + numel) continue;
    p.value = values.defined() ? values.flat(p.offset - begin, p.shape) : Tensor();
    p.compute = (is_layernorm(p.spec) && !ln_cast_) ? p.value
                : comp.defined()                    ? comp.flat(p.offset - begin, p.shape)
                                                    : Tensor();
  }
}

void ParamStore::bind_grads(int64_t begin, int64_t numel, const Tensor& grads) {
  for (auto& p : params_) {
    if (p.offset < begin || p.offset + shape_numel(p.shape) > begin + numel) continue;
    p.grad = grads.defined() ? grads.flat(p.offset - begin, p.shape) : Tensor();
  }
}

bool is_layernorm(const ParamSpec& spec) {
  switch (spec.role) {
    case ParamRole::InputLayernormWeight: case ParamRole::InputLayernormBias:
    case ParamRole::PreMlpLayernormWeight: case ParamRole::PreMlpLayernormBias:
    case ParamRole::FinalLayernormWeight: case ParamRole::FinalLayernormBias:
      return true;
    default:
      return is_qk_layernorm(spec);
  }
}

bool is_qk_layernorm(const ParamSpec& spec) {
  switch (spec.role) {
    case ParamRole::QLayernormWeight: case ParamRole::QLayernormBias:
    case ParamRole::KLayernormWeight: case ParamRole::KLayernormBias:
      return true;
    default:
      return false;
  }
}

void ParamStore::sync_compute() {
  if (compute_dtype_ != DType::F32 && values_.defined()) be_.cast(compute_values_, values_);
}

void ParamStore::sync_compute(int64_t begin, int64_t numel) {
  if (compute_dtype_ == DType::F32 || numel == 0 || !values_.defined()) return;
  Tensor dst = compute_values_.flat(begin, {numel});
  be_.cast(dst, values_.flat(begin, {numel}));
}

Param& ParamStore::get(const std::string& name) {
  auto it = index_.find(name);
  TRIPOD_CHECK(it != index_.end(), "no parameter named '{}'", name);
  return params_[it->second];
}

const Param* ParamStore::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &params_[it->second];
}

Tensor ParamStore::initial_value(const Param& p, uint64_t seed, float std, int64_t num_layers) const {
  return take_shard(init_full(p.spec, seed, std, num_layers), p.spec.shard, tp_size_, tp_rank_);
}

void ParamStore::init(uint64_t seed, float std, int64_t num_layers) {
  for (auto& p : params_) set_from_full(p, init_full(p.spec, seed, std, num_layers));
}

void ParamStore::zero_grad() {
  if (grads_.defined()) be_.zero(grads_);
}

Tensor ParamStore::value_to_host(const Param& p) const {
  Tensor h = Tensor::empty(p.shape, DType::F32);
  be_.copy(h, p.value);
  be_.synchronize();
  return h;
}

Tensor ParamStore::grad_to_host(const Param& p) const {
  Tensor h = Tensor::empty(p.shape, DType::F32);
  be_.copy(h, p.grad);
  be_.synchronize();
  return h;
}

void ParamStore::set_from_full(Param& p, const Tensor& full) {
  check_shape(full, p.spec.global_shape, p.spec.name.c_str());
  Tensor part = take_shard(full, p.spec.shard, tp_size_, tp_rank_);
  be_.copy(p.value, part);
  sync_compute(p.offset, shape_numel(p.shape));
  be_.synchronize();
}

}  // namespace tripod::model
