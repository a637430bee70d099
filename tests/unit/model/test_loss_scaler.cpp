// fp16 loss scaler (train/loss_scaler.h): the transitions of Megatron's
// DynamicGradScaler traced by hand: hysteresis before the first backoff,
// halving per overflow after that, doubling after a clean window (which
// re-arms the hysteresis), the floor at --min-loss-scale, and a static scale
// that never moves.
#include <gtest/gtest.h>

#include "train/loss_scaler.h"

namespace tripod::train {
namespace {

TEST(LossScaler, HysteresisBackoffGrowthAndFloor) {
  LossScalerConfig c;
  c.initial_scale = 1024;
  c.min_scale = 128;
  c.window = 3;
  c.hysteresis = 2;
  LossScaler s(c);
  s.update(true);  // hysteresis 2 -> 1: no change yet
  EXPECT_EQ(s.scale(), 1024);
  s.update(true);  // -> 0: halve
  EXPECT_EQ(s.scale(), 512);
  s.update(true);  // stays <= 0: halve again
  EXPECT_EQ(s.scale(), 256);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 256);
  s.update(true);  // resets the growth count; hysteresis still spent
  EXPECT_EQ(s.scale(), 128);
  s.update(true);  // floor
  EXPECT_EQ(s.scale(), 128);
  for (int i = 0; i < 3; ++i) s.update(false);  // a full clean window: double, re-arm
  EXPECT_EQ(s.scale(), 256);
  s.update(true);  // hysteresis re-armed to 2: first overflow keeps the scale
  EXPECT_EQ(s.scale(), 256);
  s.update(true);
  EXPECT_EQ(s.scale(), 128);
}

TEST(LossScaler, DefaultsAreMegatrons) {
  LossScaler s{LossScalerConfig{}};
  EXPECT_EQ(s.scale(), 4294967296.0);
  EXPECT_TRUE(s.dynamic());
}

TEST(LossScaler, StaticScaleNeverMoves) {
  LossScalerConfig c;
  c.static_scale = 4096;
  LossScaler s(c);
  EXPECT_FALSE(s.dynamic());
  for (int i = 0; i < 5; ++i) s.update(i % 2 == 0);
  EXPECT_EQ(s.scale(), 4096);
}

TEST(LossScaler, RejectsBadSettings) {
  LossScalerConfig c;
  c.min_scale = 0;
  EXPECT_ANY_THROW(LossScaler{c});
  c = LossScalerConfig{};
  c.hysteresis = 0;
  EXPECT_ANY_THROW(LossScaler{c});
}

}  // namespace
}  // namespace tripod::train
