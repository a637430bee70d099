// Implementation of model/fp8_meta.h.
#include "model/fp8_meta.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/debug_config.h"
#include "base/error.h"

namespace tripod::model {

namespace {

int64_t rows_of(const Tensor& t) { return t.size(-1) ? t.numel() / t.size(-1) : 0; }

void all_reduce_max(comm::Communicator* group, Tensor& t) {
  if (!group || group->size() == 1) return;
  comm::AllReduceOptions o;
  o.op = comm::ReduceOp::Max;
  group->all_reduce(t, o)->wait();
}

}  // namespace

// ---- Fp8State ----

Fp8State::Fp8State(const config::Fp8Config& config, int num_linears, backend::Backend& be, comm::Communicator* tp,
                   comm::Communicator* cp, int num_attentions)
    : config_(config), be_(&be), tp_(tp), cp_(cp), num_linears_(num_linears), num_attentions_(num_attentions) {
  TRIPOD_CHECK(config.enabled(), "Fp8State without --fp8-format");
  TRIPOD_CHECK(num_attentions == 0 || config.delayed(), "FP8 attention needs delayed scaling");
  const DType grad = config.format == config::Fp8Format::Hybrid ? DType::E5M2 : DType::E4M3;
  make_group(fwd_, DType::E4M3, 2 * int64_t(num_linears) + 3 * int64_t(num_attentions));
  make_group(bwd_, grad, int64_t(num_linears) + 3 * int64_t(num_attentions));
  linears_.reserve(static_cast<size_t>(num_linears));
  attentions_.reserve(static_cast<size_t>(num_attentions));
}

void Fp8State::make_group(Group& g, DType dtype, int64_t m) {
  g.dtype = dtype;
  g.fp8_max = fp8_max(dtype);
  // kMetaStride floats per tensor: every scale is a 16-byte aligned pointer
  // (cuBLASLt's FP8 GEMM takes no other), the padding entries stay at amax
  // 0, scale 1.
  const int64_t H = config_.amax_history_len, n = kMetaStride * std::max<int64_t>(m, 1);
  auto filled = [&](Shape shape, float v) {
    Tensor h = Tensor::empty(shape, DType::F32);
    for (int64_t i = 0; i < h.numel(); ++i) h.data<float>()[i] = v;
    Tensor d = be_->empty(shape, DType::F32);
    be_->copy(d, h);
    return d;
  };
  g.scale = filled({n}, 1.f);  // TE's initial scale
  g.scale_inv = filled({n}, 1.f);
  g.amax = filled({n}, 0.f);
  g.history = filled({n, H}, 0.f);
}

Fp8Linear* Fp8State::add_linear(const Param& weight) {
  TRIPOD_CHECK(static_cast<int>(linears_.size()) < num_linears_, "Fp8State: more than {} FP8 linears",
               num_linears_);
  linears_.push_back(std::make_unique<Fp8Linear>(*this, static_cast<int>(linears_.size()), weight));
  return linears_.back().get();
}

Fp8Attention* Fp8State::add_attention(std::string name) {
  TRIPOD_CHECK(static_cast<int>(attentions_.size()) < num_attentions_, "Fp8State: more than {} FP8 attentions",
               num_attentions_);
  attentions_.push_back(
      std::make_unique<Fp8Attention>(*this, static_cast<int>(attentions_.size()), std::move(name)));
  return attentions_.back().get();
}

Fp8TensorMeta Fp8State::group_meta(Group& g, int64_t t) const {
  const int64_t i = kMetaStride * t, H = config_.amax_history_len;
  Fp8TensorMeta m;
  m.scale = g.scale.flat(i, {1});
  m.scale_inv = g.scale_inv.flat(i, {1});
  m.amax = g.amax.flat(i, {1});
  m.amax_history = g.history.flat(i * H, {1, H});
  m.dtype = g.dtype;
  return m;
}

Fp8TensorMeta Fp8State::meta(int linear, int slot) {
  Group& g = slot == 2 ? bwd_ : fwd_;
  return group_meta(g, slot == 2 ? linear : 2 * int64_t(linear) + slot);
}

Fp8TensorMeta Fp8State::attention_meta(int attention, int slot) {
  TRIPOD_CHECK(attention >= 0 && attention < num_attentions_ && slot >= 0 && slot < Fp8Attention::kSlots,
               "Fp8State: attention meta ({}, {}) of {} attentions", attention, slot, num_attentions_);
  const bool fwd = slot < Fp8Attention::kDout;
  Group& g = fwd ? fwd_ : bwd_;
  return group_meta(g, (fwd ? 2 * int64_t(num_linears_) : int64_t(num_linears_)) + 3 * int64_t(attention) + slot % 3);
}

void Fp8State::quantize(Fp8TensorMeta& m, Tensor& out, Tensor* out_t, const Tensor& in, bool split,
                        bool activation) {
  backend::Backend& be = *be_;
  if (!config_.delayed()) {
    // Current scaling: this tensor's amax (the first cast's codes are
    // discarded), the whole tensor's over tp, and over cp for the
    // activations and gradients (each cp rank holds part of every
    // sequence; the weights are whole there), then its scale.
    be.zero(m.amax);
    be.fp8_quantize(out, m.amax, in, m.scale);
    if (split) all_reduce_max(tp_, m.amax);
    if (activation && cp_) all_reduce_max(cp_, m.amax);
    be.fp8_update_scale(m.scale, m.scale_inv, nullptr, m.amax, fp8_max(m.dtype), config_.margin, false);
  }
  // The amax accumulates (delayed: this iteration's; tensorwise: the same value again).
  if (out_t)
    be.fp8_cast_transpose(out, *out_t, m.amax, in, m.scale);
  else
    be.fp8_quantize(out, m.amax, in, m.scale);
}

Tensor Fp8State::scratch(int slot, bool transposed, int64_t R, int64_t C) {
  Tensor& s = scratch_[slot][transposed ? 1 : 0];
  const DType dt = slot == 0 ? fwd_.dtype : bwd_.dtype;
  if (!s.defined() || s.numel() < R * C) {
    if (s.defined()) be_->synchronize();  // queued casts may still read the old buffer
    s = be_->empty({R * C}, dt);
  }
  return s.flat(0, transposed ? Shape{C, R} : Shape{R, C});
}

Tensor Fp8State::block_scale_scratch(int slot, bool transposed, int64_t R, int64_t C) {
  Tensor& s = block_scale_scratch_[slot][transposed ? 1 : 0];
  const int64_t n = transposed ? backend::fp8_blocks(R) * C : backend::fp8_blocks(C) * R;
  if (!s.defined() || s.numel() < n) {
    if (s.defined()) be_->synchronize();  // queued casts may still read the old buffer
    s = be_->empty({n}, DType::F32);
  }
  return s.flat(0, {n});
}

Tensor Fp8State::attention_scratch(int slot, int64_t n) {
  Tensor& s = attention_scratch_[slot];
  if (!s.defined() || s.numel() < n) {
    if (s.defined()) be_->synchronize();  // queued ops may still read the old buffer
    s = be_->empty({n}, bwd_.dtype);
  }
  return s.flat(0, {n});
}

void Fp8State::begin_iteration() {
  if (config_.delayed()) {
    be_->zero(fwd_.amax);
    be_->zero(bwd_.amax);
  }
  invalidate_weights();
}

void Fp8State::end_iteration(comm::Communicator* dp) {
  if (config_.delayed()) {
    const bool use_max = config_.amax_compute_algo == config::AmaxComputeAlgo::Max;
    for (Group* g : {&fwd_, &bwd_}) {
      all_reduce_max(tp_, g->amax);
      all_reduce_max(dp, g->amax);
      be_->fp8_update_scale(g->scale, g->scale_inv, &g->history, g->amax, g->fp8_max, config_.margin, use_max);
    }
  }
  invalidate_weights();
}

void Fp8State::invalidate_weights() {
  for (auto& l : linears_) l->invalidate_weight();
}

std::vector<std::pair<std::string, Tensor>> Fp8State::state_tensors() {
  std::vector<std::pair<std::string, Tensor>> v;
  auto add = [&v](const std::string& prefix, const Fp8TensorMeta& m) {
    v.emplace_back(prefix + ".scale", m.scale);
    v.emplace_back(prefix + ".scale_inv", m.scale_inv);
    v.emplace_back(prefix + ".amax_history", m.amax_history.view({m.amax_history.numel()}));
  };
  const char* operands[] = {"input", "weight", "grad"};
  for (const auto& l : linears_)
    for (int slot = 0; slot < 3; ++slot) add(fmt::format("{}.{}", l->name(), operands[slot]), meta(l->index(), slot));
  for (const auto& a : attentions_)
    for (int slot = 0; slot < Fp8Attention::kSlots; ++slot)
      add(fmt::format("{}.{}", a->name(), Fp8Attention::slot_name(slot)), a->meta(slot));
  return v;
}

// ---- Fp8Attention ----

const char* Fp8Attention::slot_name(int slot) {
  static const char* names[kSlots] = {"qkv", "s", "o", "dout", "dp", "dqkv"};
  return names[slot];
}

Fp8Attention::Fp8Attention(Fp8State& state, int index, std::string name)
    : state_(&state), index_(index), name_(std::move(name)) {
  for (int slot = 0; slot < kSlots; ++slot) m_[slot] = state.attention_meta(index, slot);
  op_ = make_op_meta();
}

backend::Fp8AttentionMeta Fp8Attention::make_op_meta() const {
  backend::Fp8AttentionMeta m;
  m.qkv_scale_inv = m_[kQkv].scale_inv;
  m.s_scale = m_[kS].scale;
  m.s_scale_inv = m_[kS].scale_inv;
  m.s_amax = m_[kS].amax;
  m.o_scale = m_[kO].scale;
  m.o_scale_inv = m_[kO].scale_inv;
  m.o_amax = m_[kO].amax;
  m.dout_scale_inv = m_[kDout].scale_inv;
  m.dp_scale = m_[kDp].scale;
  m.dp_scale_inv = m_[kDp].scale_inv;
  m.dp_amax = m_[kDp].amax;
  m.dqkv_scale = m_[kDqkv].scale;
  m.dqkv_amax = m_[kDqkv].amax;
  return m;
}

void Fp8Attention::forward(Tensor& att, Tensor& lse, Tensor& qkv8, Tensor& att8, const Tensor& qkv, int n_head,
                           int n_kv_head) const {
  backend::Backend& be = state_->backend();
  // Delayed scaling: each cast uses the scale as it stands and accumulates
  // this iteration's amax (a recomputation casts the same values again).
  Tensor qkv_amax = m_[kQkv].amax;
  be.fp8_quantize(qkv8, qkv_amax, qkv, m_[kQkv].scale);
  be.attention_fp8_forward(att8, lse, qkv8, op_, n_head, n_kv_head);
  be.fp8_dequantize(att, att8, m_[kO].scale_inv);
}

void Fp8Attention::backward(Tensor& dqkv, const Tensor& datt, const Tensor& qkv8, const Tensor& att8,
                            const Tensor& lse, int n_head, int n_kv_head) const {
  backend::Backend& be = state_->backend();
  Tensor datt8 = state_->attention_scratch(0, datt.numel()).view(datt.shape());
  Tensor dqkv8 = state_->attention_scratch(1, dqkv.numel()).view(dqkv.shape());
  Tensor dout_amax = m_[kDout].amax;
  be.fp8_quantize(datt8, dout_amax, datt, m_[kDout].scale);
  be.attention_fp8_backward(dqkv8, datt8, qkv8, att8, lse, op_, n_head, n_kv_head);
  be.fp8_dequantize(dqkv, dqkv8, m_[kDqkv].scale_inv);
}

// ---- Fp8Linear ----

Fp8Linear::Fp8Linear(Fp8State& state, int index, const Param& weight)
    : state_(&state),
      index_(index),
      weight_(&weight),
      name_(weight.spec.name.size() > 7 && weight.spec.name.ends_with(".weight")
                ? weight.spec.name.substr(0, weight.spec.name.size() - 7)
                : weight.spec.name),
      x_(state.meta(index, 0)),
      w_(state.meta(index, 1)),
      dy_(state.meta(index, 2)) {
  const Shape& W = weight.shape;  // the local shape (ZeRO-3 binds the values only while gathered)
  TRIPOD_CHECK(W.size() == 2, "FP8 linear {}: weight {} must be (OC, IC)", weight.spec.name, shape_str(W));
  w8_ = state.backend().empty({W[0], W[1]}, DType::E4M3);
  w8_t_ = state.backend().empty({W[1], W[0]}, DType::E4M3);
  if (blockwise()) {
    ws_ = state.backend().empty({backend::fp8_blocks(W[0]) * backend::fp8_tile_ld(W[1])}, DType::F32);
    ws_t_ = state.backend().empty({backend::fp8_blocks(W[1]) * backend::fp8_tile_ld(W[0])}, DType::F32);
  }
}

bool Fp8Linear::blockwise() const { return state_->config().blockwise(); }
bool Fp8Linear::fp8_wgrad() const { return state_->config().fp8_wgrad(); }

int64_t Fp8Linear::kept_scale_numel(int64_t rows, int64_t width) const {
  return blockwise() ? backend::fp8_blocks(rows) * width : 1;
}

void Fp8Linear::use_gathered_weight(Tensor codes) {
  TRIPOD_CHECK(codes.dtype() == w_.dtype && codes.numel() == w8_.numel(), "FP8 linear {}: gathered codes {}",
               weight_->spec.name, codes.str());
  w8_ = codes.view(w8_.shape());
  gathered_ = true;
  weight_valid_ = false;
}

void Fp8Linear::ensure_weight() {
  if (weight_valid_) return;
  if (gathered_) {  // the transpose from the gathered codes (their amax already counted by the gather)
    backend::Backend& be = state_->backend();
    Tensor wide = be.empty(w8_.shape(), DType::F32), again = be.empty(w8_.shape(), w_.dtype);
    Tensor amax = be.empty({1}, DType::F32);
    be.zero(amax);
    be.fp8_dequantize(wide, w8_, w_.scale_inv);
    be.fp8_cast_transpose(again, w8_t_, amax, wide, w_.scale);
    weight_valid_ = true;
    return;
  }
  if (blockwise()) {  // 128x128 tiles: a tile lies within one tp shard when the split widths are multiples of 128
    state_->backend().fp8_block_cast_tiles(w8_, w8_t_, ws_, ws_t_, weight_->compute.view(w8_.shape()));
    weight_valid_ = true;
    return;
  }
  // Every tp rank holds a shard of W (rows or columns): its amax is the whole weight's over tp.
  state_->quantize(w_, w8_, &w8_t_, weight_->compute, true, /*activation=*/false);
  weight_valid_ = true;
}

void Fp8Linear::forward(Tensor& y, const Tensor& x, bool x_split, const Tensor* bias) {
  ensure_weight();
  const int64_t R = rows_of(x), C = x.size(-1);
  Tensor x8 = state_->scratch(0, false, R, C);
  backend::Backend& be = state_->backend();
  if (blockwise()) {
    Tensor xs = state_->block_scale_scratch(0, false, R, C);
    if (keeps_input()) {
      Tensor x_t = kept_transpose(R, C), xs_t = kept_block_scales(R, C);
      be.fp8_block_cast(x8, xs, &x_t, &xs_t, x.view({R, C}));
    } else {
      be.fp8_block_cast(x8, xs, nullptr, nullptr, x.view({R, C}));
    }
    be.fp8_block_matmul(y, x8, xs, w8_, ws_, true, bias);
    return;
  }
  if (keeps_input()) {
    Tensor x_t = kept_transpose(R, C);
    state_->quantize(x_, x8, &x_t, x.view({R, C}), x_split);
    if (!state_->config().delayed()) {  // delayed: the scale holds for the whole iteration
      Tensor si = kept_.scale_inv;
      be.copy(si, x_.scale_inv);
    }
  } else {
    state_->quantize(x_, x8, nullptr, x.view({R, C}), x_split);
  }
  // Fast accumulation for a bf16/f16 output, as Transformer Engine's forward GEMM.
  be.fp8_matmul(y, x8, x_.scale_inv, w8_, w_.scale_inv, bias, false, y.dtype() != DType::F32);
}

Tensor Fp8Linear::kept_transpose(int64_t R, int64_t C) const {
  TRIPOD_CHECK(kept_.x_t.numel() == R * C && kept_.x_t.dtype() == x_.dtype,
               "FP8 linear {}: kept input transpose {} is not ({}, {}) {}", weight_->spec.name, kept_.x_t.str(), C, R,
               dtype_name(x_.dtype));
  return kept_.x_t.view({C, R});
}

Tensor Fp8Linear::kept_block_scales(int64_t R, int64_t C) const {
  const int64_t n = kept_scale_numel(R, C);
  TRIPOD_CHECK(kept_.scale_inv.numel() == n && kept_.scale_inv.dtype() == DType::F32,
               "FP8 linear {}: kept input scales {} are not {} f32 (ceil({}/128) * {})", weight_->spec.name,
               kept_.scale_inv.str(), n, R, C);
  return kept_.scale_inv.view({n});
}

bool Fp8Linear::fuses_swiglu() const {
  // Delayed: the scale is known before the tensor; blockwise: each block's
  // scale comes from the block itself. Tensorwise needs the whole tensor's amax first.
  // --no-fp8-wgrad: fc2's weight gradient reads the compute-dtype activation and fc1's the d fc1.
  return (state_->config().delayed() || blockwise()) && fp8_wgrad() && !debug_config().fp8_unfused_swiglu;
}

void Fp8Linear::forward_swiglu(Tensor& y, const Tensor& fc1, const Tensor* bias) {
  TRIPOD_CHECK(fuses_swiglu() && keeps_input(),
               "FP8 linear {}: the SwiGLU cast needs delayed or blockwise scaling and a kept input", weight_->spec.name);
  ensure_weight();
  const int64_t R = rows_of(fc1), C = fc1.size(-1) / 2;
  Tensor x8 = state_->scratch(0, false, R, C), x_t = kept_transpose(R, C);
  backend::Backend& be = state_->backend();
  if (blockwise()) {
    Tensor xs = state_->block_scale_scratch(0, false, R, C), xs_t = kept_block_scales(R, C);
    be.fp8_swiglu_block_cast(x8, xs, x_t, xs_t, fc1.view({R, 2 * C}));
    be.fp8_block_matmul(y, x8, xs, w8_, ws_, true, bias);
    return;
  }
  be.fp8_swiglu_cast_transpose(x8, x_t, x_.amax, fc1.view({R, 2 * C}), x_.scale);
  be.fp8_matmul(y, x8, x_.scale_inv, w8_, w_.scale_inv, bias, false, y.dtype() != DType::F32);
}

void Fp8Linear::quantize_grad_swiglu(const Tensor& fc1, const Tensor& dact) {
  TRIPOD_CHECK(fuses_swiglu(), "FP8 linear {}: the SwiGLU cast needs delayed or blockwise scaling", weight_->spec.name);
  const int64_t R = rows_of(fc1), C = fc1.size(-1);
  Tensor d8 = state_->scratch(1, false, R, C), d8_t = state_->scratch(1, true, R, C);
  if (blockwise()) {
    Tensor ds = state_->block_scale_scratch(1, false, R, C), ds_t = state_->block_scale_scratch(1, true, R, C);
    state_->backend().fp8_swiglu_backward_block_cast(d8, ds, d8_t, ds_t, fc1.view({R, C}), dact.view({R, C / 2}));
  } else {
    state_->backend().fp8_swiglu_backward_cast_transpose(d8, d8_t, dy_.amax, fc1.view({R, C}),
                                                         dact.view({R, C / 2}), dy_.scale);
  }
  state_->grad_owner = this;
}

void Fp8Linear::quantize_grad(const Tensor& dy, bool dy_split) {
  const int64_t R = rows_of(dy), C = dy.size(-1);
  Tensor d8 = state_->scratch(1, false, R, C), d8_t;
  const bool t = fp8_wgrad();  // the transpose is the FP8 wgrad's operand only (its scratch taken only then)
  if (t) d8_t = state_->scratch(1, true, R, C);
  if (blockwise()) {
    Tensor ds = state_->block_scale_scratch(1, false, R, C), ds_t;
    if (t) ds_t = state_->block_scale_scratch(1, true, R, C);
    state_->backend().fp8_block_cast(d8, ds, t ? &d8_t : nullptr, t ? &ds_t : nullptr, dy.view({R, C}));
  } else {
    state_->quantize(dy_, d8, t ? &d8_t : nullptr, dy.view({R, C}), dy_split);
  }
  state_->grad_owner = this;
}

void Fp8Linear::dgrad(Tensor& dx) {
  TRIPOD_CHECK(state_->grad_owner == this, "FP8 linear {}: dgrad without its quantize_grad", weight_->spec.name);
  ensure_weight();
  const int64_t OC = w8_.size(0), R = dx.numel() / w8_.size(1);
  Tensor d8 = state_->scratch(1, false, R, OC);
  if (blockwise())
    state_->backend().fp8_block_matmul(dx, d8, state_->block_scale_scratch(1, false, R, OC), w8_t_, ws_t_, true);
  else
    state_->backend().fp8_matmul(dx, d8, dy_.scale_inv, w8_t_, w_.scale_inv);
}

void Fp8Linear::wgrad(Tensor& dweight, Tensor* dbias, const Tensor& dy, const Tensor& x, bool x_split) {
  TRIPOD_CHECK(state_->grad_owner == this, "FP8 linear {}: wgrad without its quantize_grad", weight_->spec.name);
  backend::Backend& be = state_->backend();
  if (!fp8_wgrad()) {  // --no-fp8-wgrad: the compute-dtype GEMM on x and dy as they are (and the bias gradient)
    be.matmul_backward(nullptr, &dweight, dbias, dy, x, weight_->compute);
    return;
  }
  const int64_t R = rows_of(x), C = x.size(-1), OC = w8_.size(0);
  Tensor d8_t = state_->scratch(1, true, R, OC);
  Tensor dW = dweight.view({OC, C});
  if (blockwise()) {
    Tensor ds_t = state_->block_scale_scratch(1, true, R, OC);
    if (keeps_input()) {
      be.fp8_block_matmul(dW, d8_t, ds_t, kept_transpose(R, C), kept_block_scales(R, C), false, nullptr, true);
    } else {  // the forward's codes again
      Tensor x8 = state_->scratch(0, false, R, C), x8_t = state_->scratch(0, true, R, C);
      Tensor xs = state_->block_scale_scratch(0, false, R, C), xs_t = state_->block_scale_scratch(0, true, R, C);
      be.fp8_block_cast(x8, xs, &x8_t, &xs_t, x.view({R, C}));
      be.fp8_block_matmul(dW, d8_t, ds_t, x8_t, xs_t, false, nullptr, true);
    }
  } else if (keeps_input()) {
    const Tensor& si = state_->config().delayed() ? x_.scale_inv : kept_.scale_inv;
    be.fp8_matmul(dW, d8_t, dy_.scale_inv, kept_.x_t.view({C, R}), si, nullptr, true);
  } else {
    Tensor x8 = state_->scratch(0, false, R, C), x8_t = state_->scratch(0, true, R, C);
    state_->quantize(x_, x8, &x8_t, x.view({R, C}), x_split);  // the forward's codes again
    be.fp8_matmul(dW, d8_t, dy_.scale_inv, x8_t, x_.scale_inv, nullptr, true);
  }
  if (dbias) be.matmul_backward(nullptr, nullptr, dbias, dy, x, weight_->compute);
}

}  // namespace tripod::model
