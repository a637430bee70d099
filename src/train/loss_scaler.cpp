// Implementation of train/loss_scaler.h (same transitions as Megatron's
// DynamicGradScaler: backoff 0.5, growth 2).
#include "train/loss_scaler.h"

#include <algorithm>

#include "base/error.h"

namespace tripod::train {

LossScaler::LossScaler(const LossScalerConfig& c)
    : cfg_(c), scale_(c.static_scale > 0 ? c.static_scale : c.initial_scale), hysteresis_tracker_(c.hysteresis) {
  TRIPOD_CHECK_HINT(scale_ > 0 && cfg_.min_scale > 0 && cfg_.min_scale <= scale_,
                    "use --min-loss-scale > 0 and --initial-loss-scale >= --min-loss-scale",
                    "bad loss scale settings: initial {}, min {}", scale_, cfg_.min_scale);
  TRIPOD_CHECK_HINT(cfg_.window > 0 && cfg_.hysteresis > 0, "use --loss-scale-window >= 1 and --hysteresis >= 1",
                    "bad loss scale settings: window {}, hysteresis {}", cfg_.window, cfg_.hysteresis);
}

void LossScaler::update(bool found_inf) {
  if (!dynamic()) return;
  if (found_inf) {
    growth_tracker_ = 0;
    if (--hysteresis_tracker_ <= 0) scale_ = std::max(scale_ * 0.5, cfg_.min_scale);
    return;
  }
  if (++growth_tracker_ == cfg_.window) {
    growth_tracker_ = 0;
    hysteresis_tracker_ = cfg_.hysteresis;
    scale_ *= 2.0;
  }
}

void LossScaler::restore(const State& s) {
  if (!dynamic()) return;
  TRIPOD_CHECK(s.scale > 0 && s.growth_tracker >= 0,  // the hysteresis tracker goes below 0, as Megatron's
               "bad loss-scaler state: scale {}, growth tracker {}, hysteresis tracker {}", s.scale,
               s.growth_tracker, s.hysteresis_tracker);
  scale_ = std::max(s.scale, cfg_.min_scale);
  growth_tracker_ = s.growth_tracker;
  hysteresis_tracker_ = s.hysteresis_tracker;
}

}  // namespace tripod::train
