// Implementation of optim/lr_schedule.h (Megatron's get_lr, counted in iterations).
#include "optim/lr_schedule.h"

#include <cmath>

#include "base/error.h"

namespace tripod::optim {

DecayStyle decay_style_from_name(const std::string& n) {
  if (n == "cosine") return DecayStyle::Cosine;
  if (n == "linear") return DecayStyle::Linear;
  if (n == "constant") return DecayStyle::Constant;
  TRIPOD_CHECK_HINT(false, "use --lr-decay-style cosine, linear or constant",
                    "unknown --lr-decay-style '{}'", n);
  return DecayStyle::Constant;
}

void LrSchedule::validate() const {
  TRIPOD_CHECK_HINT(max_lr >= 0 && min_lr >= 0 && min_lr <= max_lr, "set 0 <= --min-lr <= --lr",
                    "--lr {} and --min-lr {} are inconsistent", max_lr, min_lr);
  const char* unit = steps_per_iteration > 1 ? "samples" : "iters";
  TRIPOD_CHECK_HINT(warmup_iters >= 0, fmt::format("use --lr-warmup-{} >= 0", unit), "--lr-warmup-{} is {}", unit,
                    warmup_iters);
  TRIPOD_CHECK_HINT(style == DecayStyle::Constant || decay_iters > warmup_iters,
                    fmt::format("make --lr-decay-{0} larger than --lr-warmup-{0}", unit),
                    "--lr-decay-{0} {1} must exceed --lr-warmup-{0} {2}", unit, decay_iters, warmup_iters);
}

double LrSchedule::lr_at(int64_t n) const {
  if (warmup_iters > 0 && n <= warmup_iters)
    return max_lr * static_cast<double>(n) / static_cast<double>(warmup_iters);
  if (style == DecayStyle::Constant) return max_lr;
  if (n > decay_iters) return min_lr;
  const double ratio = static_cast<double>(n - warmup_iters) / static_cast<double>(decay_iters - warmup_iters);
  const double coeff = style == DecayStyle::Linear ? 1.0 - ratio : 0.5 * (std::cos(M_PI * ratio) + 1.0);
  return min_lr + coeff * (max_lr - min_lr);
}

}  // namespace tripod::optim
