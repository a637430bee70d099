// Point-to-point communication between adjacent pipeline stages, with
// Megatron's verb names (megatron/core/pipeline_parallel/p2p_communication.py):
//
//   send_forward / recv_forward      activations   rank r -> r+1
//   send_backward / recv_backward    gradients     rank r -> r-1
//   send_forward_recv_backward, send_backward_recv_forward,
//   send_forward_recv_forward, send_backward_recv_backward   (pairs, 1F1B steady state
//                                                             and the interleaved schedule)
//
// Relates to: comm/communicator.h (async send/recv with Work handles),
// parallel/pp_schedule.h (the schedules that call these), docs/pipeline.md.
//
// NOTE [Pipeline p2p ordering]
// Every verb is Megatron's _communicate: it *posts* all of its sends and
// receives, then waits for all of them, so a pair such as
// send_forward_recv_backward never deadlocks against the neighbour's
// send_backward_recv_forward whatever order either side posts in (Gloo posts
// p2p immediately from the caller's thread; NCCL groups them). When a verb
// returns, its send buffers may be reused and its receive buffers are filled.
// Activations travel with tag kActivationTag and gradients with
// kGradientTag, so with pp_size 2 and wrap-around (both neighbours are the
// same rank) the two streams between one pair of ranks never cross. Within
// one (peer, tag) stream messages match in posting order: the schedules
// guarantee that both sides walk the micro-batches in the same order.
//
// Wrap-around (interleaved schedule): the virtual stage after rank P-1's
// chunk c is rank 0's chunk c+1, so rank P-1's "next" is rank 0 and rank 0's
// "prev" is rank P-1. Without it, rank 0 has no prev and rank P-1 no next;
// asking for one is a programming error (the schedules skip first/last
// stages, as Megatron's do).
//
// Every wait runs under the communicator's timeout (PipeLink::timeout, or
// the group default when 0) and throws TimeoutError naming the ranks.
//
// Usage:
//   PipeLink link{&pp_group, /*wrap_around=*/false};
//   recv_forward(link, input);          // (B, T, C) buffer of known shape
//   ... forward ...
//   send_forward_recv_backward(link, output, output_grad);
#pragma once

#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace tripod::parallel {

constexpr int kActivationTag = 0x5050;  // forward direction: output of stage s -> input of s+1
constexpr int kGradientTag = 0x5051;    // backward direction: input grad of s+1 -> output grad of s

struct PipeLink {
  comm::Communicator* pp_group = nullptr;  // ranks in group order = pipeline stages
  bool wrap_around = false;                // ring: interleaved (virtual) pipeline
  comm::Millis timeout{0};                 // 0 = the communicator's default
};

// Group rank of the previous / next stage, or -1 when there is none.
int prev_pp_rank(const PipeLink& link);
int next_pp_rank(const PipeLink& link);

// Megatron's _communicate: any argument may be null (nothing to do in that
// direction). send_next goes to the next stage with kActivationTag,
// send_prev to the previous stage with kGradientTag; recv_prev (an
// activation) and recv_next (a gradient) likewise. Posts all, then waits all.
void pp_communicate(const PipeLink& link, const Tensor* send_next, const Tensor* send_prev,
                    Tensor* recv_prev, Tensor* recv_next);

// The named verbs (each one pp_communicate call).
void send_forward(const PipeLink& link, const Tensor& output);
void recv_forward(const PipeLink& link, Tensor& input);
void send_backward(const PipeLink& link, const Tensor& input_grad);
void recv_backward(const PipeLink& link, Tensor& output_grad);
void send_forward_recv_backward(const PipeLink& link, const Tensor& output, Tensor& output_grad);
void send_backward_recv_forward(const PipeLink& link, const Tensor& input_grad, Tensor& input);
void send_forward_recv_forward(const PipeLink& link, const Tensor& output, Tensor& input);
void send_backward_recv_backward(const PipeLink& link, const Tensor& input_grad, Tensor& output_grad);

}  // namespace tripod::parallel
