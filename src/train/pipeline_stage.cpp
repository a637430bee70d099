// Implementation of train/pipeline_stage.h.
#include "train/pipeline_stage.h"

#include <chrono>
#include <thread>

#include "base/debug_config.h"
#include "base/error.h"
#include "base/timer.h"

namespace tripod::train {

GptPipelineStage::GptPipelineStage(std::vector<model::GptModel*> chunks, int64_t B, int64_t T)
    : chunks_(std::move(chunks)), B_(B), T_(T), free_(chunks_.size()),
      slot_bytes_(chunks_.size(), 0),
      // Testing aid (undocumented for users): sleep this long in every
      // micro-batch load, so tests can check that the time split's "data"
      // part is what the loader costs.
      data_sleep_ms_(debug_config().testing_data_sleep_ms) {
  sent_grad_.resize(chunks_.size());
}

void GptPipelineStage::set_param_hooks(int last_microbatch, ParamHook grads_ready, ParamHook before_use) {
  last_microbatch_ = last_microbatch;
  grads_ready_.assign(chunks_.size(), {});
  before_use_.assign(chunks_.size(), {});
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const int ci = static_cast<int>(c);
    if (grads_ready) grads_ready_[c] = [grads_ready, ci](const std::vector<size_t>& p) { grads_ready(ci, p); };
    if (before_use) before_use_[c] = [before_use, ci](const std::vector<size_t>& p) { before_use(ci, p); };
  }
}

void GptPipelineStage::begin(bool with_grad, float dloss, uint64_t dropout_seed, BatchSource batches) {
  batches_ = batches;
  with_grad_ = with_grad;
  dloss_ = dloss;
  seed_ = dropout_seed;
  loss_sum_ = 0;
  loss_tokens_ = 0;
  losses_pending_ = 0;
  max_live_ = 0;
  data_seconds_ = 0;
  if (pending_release_.first >= 0) release(pending_release_.first, pending_release_.second);
  pending_release_ = {-1, -1};
  sent_key_ = {-1, -1};
  while (!live_.empty()) release(live_.begin()->first.first, live_.begin()->first.second);
}

GptPipelineStage::Slot& GptPipelineStage::slot(int m, int c) {
  auto key = std::make_pair(m, c);
  auto it = live_.find(key);
  if (it != live_.end()) return *it->second;
  std::unique_ptr<Slot> s;
  auto& pool = free_[static_cast<size_t>(c)];
  if (!pool.empty()) {
    s = std::move(pool.back());
    pool.pop_back();
  } else {
    s = std::make_unique<Slot>();
    s->acts = chunks_[static_cast<size_t>(c)]->make_acts(B_, T_);
    slot_bytes_[static_cast<size_t>(c)] = s->acts.bytes();
  }
  Slot& ref = *s;
  live_.emplace(key, std::move(s));
  max_live_ = std::max(max_live_, live_.size());
  return ref;
}

void GptPipelineStage::release(int m, int c) {
  auto it = live_.find({m, c});
  if (it == live_.end()) return;
  free_[static_cast<size_t>(c)].push_back(std::move(it->second));
  live_.erase(it);
}

Tensor& GptPipelineStage::output_grad(int m, int c) {
  Slot& s = slot(m, c);
  if (!s.output_grad.defined())
    s.output_grad = chunks_[static_cast<size_t>(c)]->backend().empty(s.acts.output().shape(), s.acts.output().dtype());
  return s.output_grad;
}

void GptPipelineStage::forward(int m, int c) {
  if (!with_grad_ && pending_release_.first >= 0) release(pending_release_.first, pending_release_.second);
  model::GptModel& model = *chunks_[static_cast<size_t>(c)];
  model::MicroBatchActs& a = acts(m, c);
  a.sample_offset = batches_.sample_offset(m);  // middle chunks need the offset only (dropout keys)
  if (model.stage().pre_process || model.stage().post_process) {
    Timer load;
    if (data_sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(data_sleep_ms_));
    Tensor tokens = Tensor::empty({B_, T_}, DType::I32), targets = Tensor::empty({B_, T_}, DType::I32);
    batches_.load(m, tokens, targets);
    if (model.stage().pre_process) model.backend().copy(a.tokens, tokens);
    if (model.stage().post_process) model.backend().copy(a.targets, targets);
    data_seconds_ += load.seconds();
  }
  const auto* use = before_use_.empty() ? nullptr : &before_use_[static_cast<size_t>(c)];
  model.forward(a, with_grad_, dloss_, seed_, use);
  if (model.stage().post_process) {
    // Device-side copy; summed on the host in loss_sum(), in this order.
    if (losses_pending_ == loss_parts_.size()) loss_parts_.push_back(model.backend().empty(a.losses.shape(), DType::F32));
    model.backend().copy(loss_parts_[losses_pending_++], a.losses);
    loss_tokens_ += a.losses.numel();
  }
  if (!with_grad_) pending_release_ = {m, c};  // output sent before the next forward
}

void GptPipelineStage::backward(int m, int c) {
  if (pending_release_.first >= 0) release(pending_release_.first, pending_release_.second);
  pending_release_ = {-1, -1};
  model::GptModel& model = *chunks_[static_cast<size_t>(c)];
  Slot& s = slot(m, c);
  const auto* ready = m == last_microbatch_ && !grads_ready_.empty() ? &grads_ready_[static_cast<size_t>(c)] : nullptr;
  model.backward(s.acts, model.stage().post_process ? nullptr : &s.output_grad, seed_, ready);
  // The activations of (m, c) are dead now; only the input gradient still
  // has to be sent (done before the next backward starts: the buffer
  // contract in parallel/pp_schedule.h). It moves to sent_grad_[c] (the
  // slot takes that chunk's previous one, long sent), and the slot goes
  // back to the pool before the next micro-batch's forward. Holding the
  // whole slot until the next backward kept one more micro-batch of
  // activations on every stage but the first (and, at pp 1, under gradient
  // accumulation).
  if (!model.stage().pre_process) {
    Tensor& sent = sent_grad_[static_cast<size_t>(c)];
    if (!sent.defined()) sent = model.backend().empty(s.acts.grad_input.shape(), s.acts.grad_input.dtype());
    std::swap(sent, s.acts.grad_input);
    sent_key_ = {m, c};
  }
  release(m, c);
}

const Tensor& GptPipelineStage::input_grad(int m, int c) {
  TRIPOD_CHECK(sent_key_ == std::make_pair(m, c), "input_grad({}, {}) asked for after backward({}, {})", m, c,
               sent_key_.first, sent_key_.second);
  return sent_grad_[static_cast<size_t>(c)];
}

double GptPipelineStage::loss_sum() {
  if (losses_pending_ == 0) return loss_sum_;
  backend::Backend& be = chunks_.back()->backend();
  std::vector<Tensor> host;
  for (size_t k = 0; k < losses_pending_; ++k) {
    host.push_back(Tensor::empty(loss_parts_[k].shape(), DType::F32));
    be.copy(host.back(), loss_parts_[k]);
  }
  be.synchronize();
  for (const Tensor& h : host)
    for (int64_t i = 0; i < h.numel(); ++i) loss_sum_ += h.data<float>()[i];
  losses_pending_ = 0;
  return loss_sum_;
}

size_t GptPipelineStage::activation_bytes_per_microbatch() const {
  size_t n = 0;
  for (size_t b : slot_bytes_) n += b;
  return n;
}

}  // namespace tripod::train
