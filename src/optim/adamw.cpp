// Implementation of optim/adamw.h.
#include "optim/adamw.h"

#include "base/error.h"

namespace tripod::optim {

std::vector<Segment> merge_segments(std::vector<Segment> in) {
  std::vector<Segment> out;
  for (const auto& s : in) {
    if (s.numel == 0) continue;
    if (!out.empty() && out.back().weight_decay == s.weight_decay && out.back().decoupled_lr == s.decoupled_lr &&
        out.back().offset + out.back().numel == s.offset)
      out.back().numel += s.numel;
    else
      out.push_back(s);
  }
  return out;
}

AdamW::AdamW(backend::Backend& be, int64_t numel, const AdamWConfig& config) : be_(be), config_(config) {
  TRIPOD_CHECK_HINT(config.beta1 >= 0 && config.beta1 < 1 && config.beta2 >= 0 && config.beta2 < 1,
                    "use --adam-beta1/--adam-beta2 in [0, 1)", "adam betas ({}, {}) out of range",
                    config.beta1, config.beta2);
  TRIPOD_CHECK_HINT(config.eps > 0, "use a positive --adam-eps", "--adam-eps is {}", config.eps);
  m_ = be.empty({numel}, DType::F32);
  v_ = be.empty({numel}, DType::F32);
  be.zero(m_);
  be.zero(v_);
}

void AdamW::step(Tensor& values, const Tensor& grads, const std::vector<Segment>& segments, double lr,
                 float grad_scale, Tensor* compute, double decoupled_lr) {
  ++steps_;
  backend::AdamWStep s;
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(config_.beta1);
  s.beta2 = static_cast<float>(config_.beta2);
  s.eps = static_cast<float>(config_.eps);
  s.step = steps_;
  s.grad_scale = grad_scale;
  for (const auto& seg : segments) {
    s.weight_decay = seg.weight_decay ? static_cast<float>(config_.weight_decay) : 0.f;
    s.lr = static_cast<float>(seg.decoupled_lr && decoupled_lr >= 0 ? decoupled_lr : lr);
    Tensor p = values.flat(seg.offset, {seg.numel});
    Tensor g = grads.flat(seg.offset, {seg.numel});
    Tensor m = m_.flat(seg.offset, {seg.numel});
    Tensor v = v_.flat(seg.offset, {seg.numel});
    if (compute) {
      Tensor c = compute->flat(seg.offset, {seg.numel});
      be_.adamw_update(p, g, m, v, s, &c);
    } else {
      be_.adamw_update(p, g, m, v, s);
    }
  }
}

float clip_coefficient(double total_norm, double max_norm) {
  if (max_norm <= 0) return 1.f;
  const double c = max_norm / (total_norm + 1e-6);
  return c < 1.0 ? static_cast<float>(c) : 1.f;
}

}  // namespace tripod::optim
