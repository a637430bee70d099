// plan/calibrate under --fp8-recipe blockwise on the CPU backend: the
// block-scaled FP8 linears and weight casts are timed with the real block
// ops (fp8_block_cast, fp8_block_cast_tiles, fp8_block_matmul, whose
// argument checks refuse a scale array of the wrong layout), and fitted as
// their own class.
#include <gtest/gtest.h>

#include <set>

#include "backend/cpu/cpu_backend.h"
#include "plan/calibrate.h"
#include "unit/plan/plan_models.h"

namespace tripod::plan {
namespace {

OpShape shape(OpKind k, int64_t a, int64_t b, int64_t c = 0, int64_t d = 0) {
  OpShape o;
  o.kind = k;
  o.d[0] = a, o.d[1] = b, o.d[2] = c, o.d[3] = d;
  return o;
}

// Tiny shapes with partial blocks (rows, in, out not multiples of 128; a
// weight of 3 x 2 tiles), with and without the GELU.
TEST(PlanCalibrateBlock, TinyBlockShapesTimeOnTheCpu) {
  auto be = backend::make_cpu_backend();
  const std::vector<OpShape> ops = {
      shape(OpKind::kFp8BlockLinearFwd, 130, 96, 136),    shape(OpKind::kFp8BlockLinearFwd, 64, 200, 72, 1),
      shape(OpKind::kFp8BlockLinearBwd, 130, 96, 136),    shape(OpKind::kFp8BlockLinearBwd, 64, 200, 72, 1),
      shape(OpKind::kFp8BlockWeightCast, 300, 129)};
  OpProfile p;
  p.device = device_model_name(*be);
  EXPECT_EQ(calibrate_ops(*be, ops, p), 5);
  for (const OpShape& o : ops) {
    ASSERT_TRUE(p.has(o)) << o.key();
    EXPECT_GT(p.measured.at(o.key()), 0.0) << o.key();
  }
  // The linears fit as their own class (not the per-tensor FP8 one's).
  ASSERT_EQ(p.fits.count(OpClass::kFp8BlockLinear), 1u);
  EXPECT_EQ(p.fits.at(OpClass::kFp8BlockLinear).points, 4);
  EXPECT_GT(p.fits.at(OpClass::kFp8BlockLinear).rate, 0.0);
  EXPECT_EQ(p.fits.count(OpClass::kFp8Linear), 0u);
  EXPECT_EQ(p.fits.at(OpClass::kMemory).points, 1);  // the weight cast
  EXPECT_EQ(calibrate_ops(*be, ops, p), 0);             // measured already
}

// A blockwise model's calibration: what --calibrate would measure holds
// the block kinds and none of the per-tensor FP8 ones, and every op of a
// micro-batch and of the step is timed, so the plan adds up measured times.
TEST(PlanCalibrateBlock, BlockwiseModelIsCalibratedWithTheBlockKinds) {
  GptConfig m = gpt_model(2, 128, 4, 64, 256);
  m.fp8.format = config::Fp8Format::Hybrid;
  m.fp8.recipe = config::Fp8Recipe::Blockwise;
  Machine mc;
  mc.gpus_per_node = 1;
  SearchOptions o;
  o.global_batch = 2;
  o.micro_batch = 2;
  const std::vector<OpShape> wanted = ops_of_fitting_layouts(m, mc, o, nullptr);
  std::set<OpKind> kinds;
  for (const auto& op : wanted) kinds.insert(op.kind);
  EXPECT_TRUE(kinds.count(OpKind::kFp8BlockLinearFwd) && kinds.count(OpKind::kFp8BlockLinearBwd) &&
              kinds.count(OpKind::kFp8BlockWeightCast));
  EXPECT_FALSE(kinds.count(OpKind::kFp8LinearFwd) || kinds.count(OpKind::kFp8LinearBwd) ||
               kinds.count(OpKind::kFp8WeightCast));

  auto be = backend::make_cpu_backend();
  OpProfile p;
  p.device = device_model_name(*be);
  EXPECT_EQ(calibrate_ops(*be, wanted, p), int(wanted.size()));
  Layout l = layout(1);
  l.micro_batch = 2, l.global_batch = 2;
  const auto mb = micro_batch_ops(m, l), step = step_ops(m, l);
  EXPECT_EQ(p.measured_count(mb), int(mb.size()));
  EXPECT_EQ(p.measured_count(step), int(step.size()));
  for (const auto& c : mb)
    if (c.op.op_class() == OpClass::kFp8BlockLinear) EXPECT_GT(p.seconds(c.op), 0.0) << c.op.key();
  bool ok = true;
  EXPECT_GT(p.seconds_of(mb, &ok) + p.seconds_of(step, &ok), 0.0);
  EXPECT_TRUE(ok);
}

}  // namespace
}  // namespace tripod::plan
