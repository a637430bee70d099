// Learning-rate schedule with Megatron's semantics (OptimizerParamScheduler):
// linear warmup from 0 over --lr-warmup-iters, then --lr-decay-style
// cosine | linear | constant from --lr to --min-lr until --lr-decay-iters,
// then --min-lr. The lr used by iteration `it` (1-based) is lr_at(it - 1):
// Megatron steps the scheduler after each optimizer step, so with warmup the
// first iteration runs at lr 0. A sample-based run (--train-samples) counts
// the schedule in samples, as Megatron steps it by the global batch:
// warmup_iters and decay_iters then hold --lr-warmup-samples and
// --lr-decay-samples, steps_per_iteration the global batch size.
#pragma once

#include <cstdint>
#include <string>

namespace tripod::optim {

enum class DecayStyle { Constant, Linear, Cosine };
DecayStyle decay_style_from_name(const std::string& name);  // throws naming --lr-decay-style

struct LrSchedule {
  double max_lr = 1e-4, min_lr = 0.0;
  int64_t warmup_iters = 0, decay_iters = 0;
  DecayStyle style = DecayStyle::Cosine;
  int64_t steps_per_iteration = 1;  // 1: counted in iterations; the global batch: in samples

  void validate() const;
  double lr_at(int64_t steps_done) const;
  double lr_for_iteration(int64_t iteration) const { return lr_at((iteration - 1) * steps_per_iteration); }
};

}  // namespace tripod::optim
