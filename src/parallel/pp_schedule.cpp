// Pipeline schedule entry points: config validation, the driver that turns
// a schedule body's steps into PipelineStage calls and pp p2p, and the dry
// driver behind schedule_order.
//
// Relates to: parallel/pp_schedule.h (contract), pp_schedule_1f1b.cpp,
// pp_schedule_interleaved.cpp (the bodies), parallel/p2p.h.
#include "parallel/pp_schedule.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.h"
#include "base/timer.h"
#include "parallel/p2p.h"

namespace tripod::parallel {

void validate_schedule_config(const ScheduleConfig& c) {
  TRIPOD_CHECK_HINT(c.pp_size >= 1, "set --pipeline-model-parallel-size to 1 or more",
                    "pipeline size {} must be >= 1", c.pp_size);
  TRIPOD_CHECK(c.pp_rank >= 0 && c.pp_rank < c.pp_size, "pp rank {} is outside [0, {})", c.pp_rank,
               c.pp_size);
  TRIPOD_CHECK_HINT(c.num_microbatches >= 1,
                    "raise --global-batch-size or lower --micro-batch-size (micro-batches = global "
                    "batch / (micro batch x dp))",
                    "number of micro-batches is {}; it must be >= 1", c.num_microbatches);
  TRIPOD_CHECK_HINT(c.num_chunks >= 1, "check --num-layers-per-virtual-pipeline-stage",
                    "virtual pipeline stages per rank is {}; it must be >= 1", c.num_chunks);
  if (c.num_chunks == 1) return;
  TRIPOD_CHECK_HINT(c.pp_size >= 2,
                    "drop --num-layers-per-virtual-pipeline-stage, or use "
                    "--pipeline-model-parallel-size 2 or more",
                    "the interleaved schedule ({} virtual stages per rank) needs a pipeline of 2 or "
                    "more stages, got --pipeline-model-parallel-size {}",
                    c.num_chunks, c.pp_size);
  TRIPOD_CHECK_HINT(c.num_microbatches % c.pp_size == 0,
                    fmt::format("choose --global-batch-size / (--micro-batch-size x dp) as a multiple "
                                "of {}, or drop --num-layers-per-virtual-pipeline-stage",
                                c.pp_size),
                    "the interleaved schedule (--num-layers-per-virtual-pipeline-stage, {} chunks "
                    "per rank) needs the number of micro-batches ({}) to be a multiple of "
                    "--pipeline-model-parallel-size ({})",
                    c.num_chunks, c.num_microbatches, c.pp_size);
}

double theoretical_bubble_fraction(const ScheduleConfig& c) {
  return double(c.pp_size - 1) / (double(c.num_chunks) * c.num_microbatches);
}

double measured_bubble_fraction(const ScheduleStats& s) {
  return s.compute_seconds > 0 ? s.wait_seconds / s.compute_seconds : 0.0;
}

std::string format_schedule(const std::vector<ScheduleStep>& steps, bool show_chunks) {
  std::string out;
  for (const auto& s : steps) {
    if (!out.empty()) out += ' ';
    out += show_chunks ? fmt::format("{}{}.{}", s.kind, s.microbatch, s.chunk)
                       : fmt::format("{}{}", s.kind, s.microbatch);
  }
  return out;
}

namespace {

using detail::MbChunk;

// Records steps and the live-activation count; shared by both drivers.
class Recorder : public detail::ScheduleDriver {
 public:
  explicit Recorder(const ScheduleConfig& c) : cfg_(c) {}
  ScheduleStats stats;

 protected:
  void record(char kind, MbChunk x) {
    stats.steps.push_back({kind, x.m, x.c});
    if (cfg_.forward_only) return;
    live_ += kind == 'F' ? 1 : -1;
    stats.max_live_microbatches = std::max(stats.max_live_microbatches, live_);
  }
  const ScheduleConfig& cfg_;

 private:
  int live_ = 0;
};

class DryDriver final : public Recorder {
 public:
  using Recorder::Recorder;
  void forward(MbChunk x) override { record('F', x); }
  void backward(MbChunk x) override { record('B', x); }
  void communicate(MbChunk, MbChunk, MbChunk, MbChunk) override {}
};

class StageDriver final : public Recorder {
 public:
  StageDriver(PipelineStage& stage, comm::Communicator& pp_group, const ScheduleConfig& c)
      : Recorder(c), stage_(stage), link_{&pp_group, c.num_chunks > 1, comm::Millis{0}} {}

  void forward(MbChunk x) override {
    record('F', x);
    Timer t;
    stage_.forward(x.m, x.c);
    stats.compute_seconds += t.seconds();
  }
  void backward(MbChunk x) override {
    record('B', x);
    Timer t;
    stage_.backward(x.m, x.c);
    stats.compute_seconds += t.seconds();
  }
  void communicate(MbChunk send_fwd, MbChunk send_bwd, MbChunk recv_fwd, MbChunk recv_bwd) override {
    // Megatron's is_pipeline_first_stage / is_pipeline_last_stage, per virtual stage.
    // Handles are copied (same storage), so a stage may keep its buffers in a
    // container that moves them when it grows.
    Tensor send_next, send_prev, recv_prev, recv_next;
    if (send_fwd.some() && !last(send_fwd))
      send_next = checked(stage_.output_tensor(send_fwd.m, send_fwd.c), "output_tensor", send_fwd);
    if (send_bwd.some() && !first(send_bwd))
      send_prev = checked(stage_.input_grad(send_bwd.m, send_bwd.c), "input_grad", send_bwd);
    if (recv_fwd.some() && !first(recv_fwd))
      recv_prev = checked(stage_.input_tensor(recv_fwd.m, recv_fwd.c), "input_tensor", recv_fwd);
    if (recv_bwd.some() && !last(recv_bwd))
      recv_next = checked(stage_.output_grad(recv_bwd.m, recv_bwd.c), "output_grad", recv_bwd);
    auto ptr = [](Tensor& t) { return t.defined() ? &t : nullptr; };
    if (!send_next.defined() && !send_prev.defined() && !recv_prev.defined() && !recv_next.defined())
      return;
    Timer t;
    pp_communicate(link_, ptr(send_next), ptr(send_prev), ptr(recv_prev), ptr(recv_next));
    stats.wait_seconds += t.seconds();
  }

 private:
  Tensor checked(const Tensor& t, const char* what, MbChunk x) const {
    TRIPOD_CHECK(t.defined(), "pipeline stage (pp rank {}) returned an empty {}({}, {})",
                 cfg_.pp_rank, what, x.m, x.c);
    return t;
  }
  bool first(MbChunk x) const { return cfg_.pp_rank == 0 && x.c == 0; }
  bool last(MbChunk x) const { return cfg_.pp_rank == cfg_.pp_size - 1 && x.c == cfg_.num_chunks - 1; }
  PipelineStage& stage_;
  PipeLink link_;
};

void run_body(detail::ScheduleDriver& d, const ScheduleConfig& c) {
  if (c.num_chunks > 1)
    detail::run_interleaved(d, c);
  else
    detail::run_1f1b(d, c);
}

}  // namespace

std::vector<ScheduleStep> schedule_order(const ScheduleConfig& config) {
  validate_schedule_config(config);
  DryDriver d(config);
  run_body(d, config);
  return std::move(d.stats.steps);
}

ScheduleStats run_pipeline_schedule(PipelineStage& stage, comm::Communicator& pp_group,
                                    const ScheduleConfig& config) {
  validate_schedule_config(config);
  TRIPOD_CHECK(pp_group.size() == config.pp_size && pp_group.rank() == config.pp_rank,
               "pipeline schedule for pp rank {} of {} was given group {} where this is rank {} of "
               "{}", config.pp_rank, config.pp_size, pp_group.name(), pp_group.rank(), pp_group.size());
  TRIPOD_CHECK_HINT(stage.num_chunks() == config.num_chunks,
                    "--num-layers-per-virtual-pipeline-stage decides both; build them from one value",
                    "the stage holds {} model chunks but the schedule was configured for {}",
                    stage.num_chunks(), config.num_chunks);
  StageDriver d(stage, pp_group, config);
  run_body(d, config);
  return std::move(d.stats);
}

}  // namespace tripod::parallel
