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

// A scaler restored from another's state (as a checkpoint resume does) makes
// the same transitions from then on as the original that kept running.
TEST(LossScaler, RestoredStateContinuesTheSameSequence) {
  LossScalerConfig c;
  c.initial_scale = 1 << 16;
  c.window = 4;
  c.hysteresis = 2;
  LossScaler a(c);
  const bool before[] = {true, false, false, true, true, false};
  for (bool f : before) a.update(f);
  LossScaler b(c);
  b.restore(a.state());
  EXPECT_EQ(b.state().scale, a.state().scale);
  const bool after[] = {false, false, true, false, false, false, false, true, true, false};
  for (bool f : after) {
    a.update(f);
    b.update(f);
    EXPECT_EQ(a.scale(), b.scale());
    EXPECT_EQ(a.state().growth_tracker, b.state().growth_tracker);
    EXPECT_EQ(a.state().hysteresis_tracker, b.state().hysteresis_tracker);
  }
  // A fresh scaler (what an un-restored resume had) diverges on this sequence.
  LossScaler fresh(c);
  for (bool f : after) fresh.update(f);
  EXPECT_NE(fresh.scale(), a.scale());
  // A static scale belongs to the flag, not to the checkpoint.
  LossScalerConfig sc;
  sc.static_scale = 8;
  LossScaler st(sc);
  st.restore({1024, 0, 2});
  EXPECT_EQ(st.scale(), 8);
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
