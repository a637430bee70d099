// Pipeline p2p verbs over the pp group's async send/recv.
// See NOTE [Pipeline p2p ordering] in parallel/p2p.h.
// Reference: Megatron-LM megatron/core/pipeline_parallel/p2p_communication.py (_communicate).
#include "parallel/p2p.h"

#include <memory>
#include <vector>

#include "base/error.h"

namespace tripod::parallel {

int prev_pp_rank(const PipeLink& link) {
  const int r = link.pp_group->rank(), n = link.pp_group->size();
  if (r > 0) return r - 1;
  return link.wrap_around && n > 1 ? n - 1 : -1;
}

int next_pp_rank(const PipeLink& link) {
  const int r = link.pp_group->rank(), n = link.pp_group->size();
  if (r + 1 < n) return r + 1;
  return link.wrap_around && n > 1 ? 0 : -1;
}

static int peer_or_fail(const PipeLink& link, int peer, const char* op, const char* side) {
  TRIPOD_CHECK(peer >= 0, "{} on pp group {} (pp rank {} of {}): there is no {} stage{}", op,
               link.pp_group->name(), link.pp_group->rank(), link.pp_group->size(), side,
               link.wrap_around ? "" : " (the schedule must skip the first/last stage)");
  return peer;
}

void pp_communicate(const PipeLink& link, const Tensor* send_next, const Tensor* send_prev,
                    Tensor* recv_prev, Tensor* recv_next) {
  TRIPOD_CHECK(link.pp_group != nullptr, "pipeline p2p without a pp group");
  auto& g = *link.pp_group;
  const comm::SendOptions act_send{kActivationTag, link.timeout}, grad_send{kGradientTag, link.timeout};
  const comm::RecvOptions act_recv{kActivationTag, link.timeout}, grad_recv{kGradientTag, link.timeout};
  std::vector<std::shared_ptr<comm::Work>> works;
  works.reserve(4);
  auto post_send_next = [&] {
    if (send_next)
      works.push_back(g.send(*send_next, peer_or_fail(link, next_pp_rank(link), "send_forward", "next"),
                             act_send));
  };
  auto post_recv_prev = [&] {
    if (recv_prev)
      works.push_back(g.recv(*recv_prev, peer_or_fail(link, prev_pp_rank(link), "recv_forward", "previous"),
                             act_recv));
  };
  auto post_send_prev = [&] {
    if (send_prev)
      works.push_back(g.send(*send_prev, peer_or_fail(link, prev_pp_rank(link), "send_backward", "previous"),
                             grad_send));
  };
  auto post_recv_next = [&] {
    if (recv_next)
      works.push_back(g.recv(*recv_next, peer_or_fail(link, next_pp_rank(link), "recv_backward", "next"),
                             grad_recv));
  };
  // With truly async posting (Gloo, grouped NCCL) any order is deadlock-free.
  // Megatron's even/odd order (_p2p_ops) additionally pairs each op with the
  // neighbour's matching op first, which keeps a communicator that serialises
  // p2p on one stream from deadlocking when pp_size is even.
  if (g.rank() % 2 == 0) {
    post_send_next(), post_recv_prev(), post_send_prev(), post_recv_next();
  } else {
    post_recv_prev(), post_send_next(), post_recv_next(), post_send_prev();
  }
  for (auto& w : works) w->wait();
}

void send_forward(const PipeLink& l, const Tensor& output) {
  pp_communicate(l, &output, nullptr, nullptr, nullptr);
}
void recv_forward(const PipeLink& l, Tensor& input) {
  pp_communicate(l, nullptr, nullptr, &input, nullptr);
}
void send_backward(const PipeLink& l, const Tensor& input_grad) {
  pp_communicate(l, nullptr, &input_grad, nullptr, nullptr);
}
void recv_backward(const PipeLink& l, Tensor& output_grad) {
  pp_communicate(l, nullptr, nullptr, nullptr, &output_grad);
}
void send_forward_recv_backward(const PipeLink& l, const Tensor& output, Tensor& output_grad) {
  pp_communicate(l, &output, nullptr, nullptr, &output_grad);
}
void send_backward_recv_forward(const PipeLink& l, const Tensor& input_grad, Tensor& input) {
  pp_communicate(l, nullptr, &input_grad, &input, nullptr);
}
void send_forward_recv_forward(const PipeLink& l, const Tensor& output, Tensor& input) {
  pp_communicate(l, &output, nullptr, &input, nullptr);
}
void send_backward_recv_backward(const PipeLink& l, const Tensor& input_grad, Tensor& output_grad) {
  pp_communicate(l, nullptr, &input_grad, nullptr, &output_grad);
}

}  // namespace tripod::parallel
