// Loss scaling for --fp16 (Megatron's optimizer/grad_scaler.py): the loss
// gradient is multiplied by `scale` so small fp16 activation gradients do not
// flush to zero; the f32 gradients are divided by it again in the optimizer.
// Dynamic scaling: an overflow (non-finite grad norm) skips the step; after
// `hysteresis` overflows since the last growth, every further overflow halves
// the scale (not below min_scale); `window` clean steps in a row double it
// and re-arm the hysteresis. Static scaling (--loss-scale S) never changes.
#pragma once

#include <cstdint>

namespace tripod::train {

struct LossScalerConfig {
  double initial_scale = 4294967296.0;  // --initial-loss-scale (2^32)
  double min_scale = 1.0;               // --min-loss-scale
  int64_t window = 1000;                // --loss-scale-window
  int hysteresis = 2;                   // --hysteresis
  double static_scale = 0;              // --loss-scale (0: dynamic)
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& c);
  double scale() const { return scale_; }
  bool dynamic() const { return cfg_.static_scale <= 0; }
  // After the backward of an iteration: found_inf = the grads overflowed.
  void update(bool found_inf);

  // What a checkpoint keeps, so a resumed fp16 run continues with the same
  // scale and the same distance to the next growth / backoff.
  struct State {
    double scale;
    int64_t growth_tracker;
    int hysteresis_tracker;
  };
  State state() const { return {scale_, growth_tracker_, hysteresis_tracker_}; }
  // A static scale (--loss-scale) is the flag's, not the checkpoint's.
  void restore(const State& s);

 private:
  LossScalerConfig cfg_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int hysteresis_tracker_;
};

}  // namespace tripod::train
