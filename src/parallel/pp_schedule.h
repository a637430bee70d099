// Pipeline-parallel schedules: 1F1B (PipeDream-Flush) and Megatron's
// interleaved schedule over virtual pipeline stages.
//
// Relates to: parallel/p2p.h (the send/recv verbs), parallel/groups.h (the pp
// group), train/ (implements PipelineStage around GPT model chunks),
// docs/pipeline.md (timelines, bubble math).
// References: Narayanan et al. 2021, "Efficient Large-Scale Language Model
// Training on GPU Clusters Using Megatron-LM", sections 2.2.1-2.2.2;
// Megatron-LM megatron/core/pipeline_parallel/schedules.py
// (forward_backward_pipelining_without_interleaving,
// forward_backward_pipelining_with_interleaving).
//
// The schedules are generic: they drive "a stage" through PipelineStage (as
// Megatron's schedules take a forward_step_func), so parallel/ never
// includes model/.
//
// Contract:
//  - Every rank of the pp group calls run_pipeline_schedule with the same
//    num_microbatches, num_chunks and forward_only. pp_rank must be the
//    group's rank.
//  - The schedule calls forward(m, c) / backward(m, c) in schedule_order()
//    order. Before forward(m, c) it has received input_tensor(m, c) (unless
//    (m, c) is the first virtual stage); after it, at the next p2p call
//    (in the interleaved steady state that follows one backward), it sends
//    output_tensor(m, c) (unless last virtual stage). Backward likewise with
//    output_grad / input_grad. The tensors' shapes must match the peer's
//    (known in advance: (micro_batch, T, C), or the sp shard of it).
//  - Buffer lifetimes (every p2p call is complete before the next
//    forward/backward call that could depend on it, see NOTE [Pipeline p2p
//    ordering] in p2p.h):
//      input_tensor(m,c), output_grad(m,c): asked for (and filled) at most two
//        compute steps before forward / backward(m,c): allocate on demand;
//      output_tensor(m,c): read after forward(m,c), done before backward(m,c)
//        starts (forward_only: before the next forward starts), so the stage
//        may drop (m, c)'s activations inside backward(m, c);
//      input_grad(m,c): read after backward(m,c), done before the next
//        backward starts.
//  - Errors: TRIPOD_CHECK failures on bad configs (naming the flags),
//    TimeoutError from a p2p wait that ran past the pp group's timeout.
//
// Usage:
//   ScheduleConfig sc{.pp_size = pg.pp->size(), .pp_rank = pg.pp->rank(),
//                     .num_microbatches = m, .num_chunks = vpp};
//   ScheduleStats st = run_pipeline_schedule(stage, *pg.pp, sc);
//   log::info("bubble {:.3f} (theory {:.3f})", measured_bubble_fraction(st),
//             theoretical_bubble_fraction(sc));
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace tripod::parallel {

// What a schedule drives: Megatron's forward_step_func / backward, per
// (micro-batch m, model chunk c). Chunk c of pp rank r is virtual stage
// c * pp_size + r (Megatron's interleaving); without interleaving
// num_chunks() == 1. All methods are required.
class PipelineStage {
 public:
  virtual ~PipelineStage() = default;
  virtual int num_chunks() const = 0;
  // The schedule recvs into it before forward(m,c), unless first virtual stage.
  virtual Tensor& input_tensor(int m, int c) = 0;
  // The schedule sends it after forward(m,c), unless last virtual stage.
  virtual const Tensor& output_tensor(int m, int c) = 0;
  // The schedule recvs into it before backward(m,c), unless last virtual stage
  // (there the stage computes the loss gradient itself).
  virtual Tensor& output_grad(int m, int c) = 0;
  // The schedule sends it after backward(m,c), unless first virtual stage.
  virtual const Tensor& input_grad(int m, int c) = 0;
  virtual void forward(int m, int c) = 0;
  virtual void backward(int m, int c) = 0;                // may free (m,c)'s activations afterwards
};

struct ScheduleConfig {
  int pp_size = 1, pp_rank = 0;
  int num_microbatches = 1;  // global batch / (micro batch x dp)
  int num_chunks = 1;        // virtual stages per pp rank (vpp); 1 = plain 1F1B
  bool forward_only = false; // evaluation: forwards only, no activations kept
};

struct ScheduleStep {
  char kind;  // 'F' or 'B'
  int microbatch, chunk;
  bool operator==(const ScheduleStep&) const = default;
};

struct ScheduleStats {
  std::vector<ScheduleStep> steps;  // executed, in order
  // Peak number of (micro-batch, chunk) activation sets held for a pending
  // backward (forwards done minus backwards done). Without interleaving this
  // is micro-batches; 0 in forward_only mode.
  int max_live_microbatches = 0;
  double compute_seconds = 0;  // inside forward/backward
  double wait_seconds = 0;     // blocked in p2p (bubble + transfer)
};

// Validates the config (and the stage / group against it), then runs the
// schedule. pp_size 1: a plain loop F(m,0) B(m,0) per micro-batch, no p2p.
ScheduleStats run_pipeline_schedule(PipelineStage& stage, comm::Communicator& pp_group,
                                    const ScheduleConfig& config);

// The order of steps one pp rank executes (no communication).
std::vector<ScheduleStep> schedule_order(const ScheduleConfig& config);

// Checks config with errors naming the flags (--global-batch-size,
// --micro-batch-size, --pipeline-model-parallel-size,
// --num-layers-per-virtual-pipeline-stage).
void validate_schedule_config(const ScheduleConfig& config);

// (P-1)/m, or (P-1)/(v*m) interleaved: pipeline bubble time over ideal time.
double theoretical_bubble_fraction(const ScheduleConfig& config);
// wait_seconds / compute_seconds: the same ratio as measured on this rank.
double measured_bubble_fraction(const ScheduleStats& stats);

// "F0 F1 B0 ..." (chunk as "F0.1" when interleaved), for logs and test failures.
std::string format_schedule(const std::vector<ScheduleStep>& steps, bool show_chunks);

namespace detail {

// (micro-batch, chunk), or none (m < 0): a p2p slot the schedule body names.
struct MbChunk {
  int m = -1, c = 0;
  bool some() const { return m >= 0; }
};

// The schedule bodies (pp_schedule_1f1b.cpp, pp_schedule_interleaved.cpp)
// talk only to this: the real driver computes and communicates, the dry one
// records steps for schedule_order, so both run the very same code.
// Each p2p verb names the (m, c) whose tensor is sent or received; the
// driver skips a direction when (m, c) is the first / last virtual stage.
class ScheduleDriver {
 public:
  virtual ~ScheduleDriver() = default;
  virtual void forward(MbChunk x) = 0;
  virtual void backward(MbChunk x) = 0;
  virtual void communicate(MbChunk send_fwd, MbChunk send_bwd, MbChunk recv_fwd, MbChunk recv_bwd) = 0;

  void send_forward(MbChunk x) { communicate(x, {}, {}, {}); }
  void recv_forward(MbChunk x) { communicate({}, {}, x, {}); }
  void send_backward(MbChunk x) { communicate({}, x, {}, {}); }
  void recv_backward(MbChunk x) { communicate({}, {}, {}, x); }
  void send_forward_recv_backward(MbChunk f, MbChunk b) { communicate(f, {}, {}, b); }
  void send_backward_recv_forward(MbChunk b, MbChunk f) { communicate({}, b, f, {}); }
  void send_forward_recv_forward(MbChunk f, MbChunk next) { communicate(f, {}, next, {}); }
  void send_backward_recv_backward(MbChunk b, MbChunk next) { communicate({}, b, {}, next); }
};

void run_1f1b(ScheduleDriver& driver, const ScheduleConfig& config);
void run_interleaved(ScheduleDriver& driver, const ScheduleConfig& config);

}  // namespace detail
}  // namespace tripod::parallel
