// plan/op_profile: the op list of a micro-batch against hand counts of the
// model's FLOPs, the fits against synthetic points they must recover, and
// the op-time file format.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "plan/op_profile.h"
#include "unit/plan/plan_models.h"

namespace tripod::plan {
namespace {

GptConfig gpt(int64_t L, int64_t C, int64_t NH) { return gpt_model(L, C, NH, 256, 1000); }

double sum_work(const std::vector<OpCount>& ops, OpKind k) {
  double w = 0;
  for (const auto& c : ops)
    if (c.op.kind == k) w += c.count * c.op.work();
  return w;
}

TEST(OpProfile, LinearAndAttentionFlopsMatchAHandCount) {
  const GptConfig m = gpt(4, 64, 4);
  Layout l = layout(4, 2, 2);
  l.micro_batch = 3;
  const auto ops = micro_batch_ops(m, l);
  const double N = 3 * 256, C = 64, F = 256, V = double(m.padded_vocab_size(2)), layers = 2;
  // Per layer: qkv C x 3C, proj C x C, fc1 C x F, fc2 F x C, all split by tp 2;
  // the LM head C x V/2 once on the last stage.
  const double fwd = 2 * N * (layers * (3 * C * C + C * C + 2 * C * F) / 2 + C * V / 2);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kLinearFwd), fwd);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kLinearBwd), 2 * fwd);
  // Causal attention: 2 B NH T^2 HS per layer forward (half of 4 B NH T^2 HS), heads split by tp.
  const double att = layers * 2 * 3 * (4 / 2) * 256.0 * 256.0 * (64 / 4);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kAttentionFwd), att);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kAttentionBwd), 2.5 * att);

  // Full recompute runs every layer's forward twice; selective the attention core.
  l.recompute = Recompute::Full;
  const auto full = micro_batch_ops(m, l);
  EXPECT_DOUBLE_EQ(sum_work(full, OpKind::kLinearFwd), fwd + 2 * N * layers * (3 * C * C + C * C + 2 * C * F) / 2);
  EXPECT_DOUBLE_EQ(sum_work(full, OpKind::kAttentionFwd), 2 * att);
  l.recompute = Recompute::Selective;
  const auto sel = micro_batch_ops(m, l);
  EXPECT_DOUBLE_EQ(sum_work(sel, OpKind::kLinearFwd), fwd);
  EXPECT_DOUBLE_EQ(sum_work(sel, OpKind::kAttentionFwd), 2 * att);
}

// --fp8-format: the FP8 layers' linears become the FP8 kinds with the same
// shapes and FLOPs; --first-last-layers-bf16 keeps layers 0 and L-1 in the
// bf16 kinds. GPT-2 of 4 layers at pp 2: the last stage holds layers 2, 3,
// so with the bf16 first and last layers half its linears are FP8. The
// step casts each FP8 weight once (qkv 3C x C, proj, fc1, fc2 at tp 2).
TEST(OpProfile, Fp8LayersRunTheFp8Kinds) {
  GptConfig m = gpt(4, 64, 4);
  Layout l = layout(4, 2, 2);
  l.micro_batch = 3;
  const double N = 3 * 256, C = 64, F = 256, V = double(m.padded_vocab_size(2)), layers = 2;
  const double layer_fwd = 2 * N * layers * (3 * C * C + C * C + 2 * C * F) / 2, head_fwd = 2 * N * C * V / 2;
  m.fp8.format = config::Fp8Format::Hybrid;
  EXPECT_DOUBLE_EQ(fp8_layer_share(m, l), 1.0);
  auto ops = micro_batch_ops(m, l);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kFp8LinearFwd), layer_fwd);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kFp8LinearBwd), 2 * layer_fwd);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kLinearFwd), head_fwd);  // the output layer stays bf16
  auto weight_casts = [&](const std::vector<OpCount>& st) {
    double elements = 0;
    for (const auto& c : st)
      if (c.op.kind == OpKind::kFp8WeightCast) elements += c.count * double(c.op.d[0] * c.op.d[1]);
    return elements;
  };
  EXPECT_DOUBLE_EQ(weight_casts(step_ops(m, l)), layers * (3 * C * C + C * C + 2 * C * F) / 2);
  m.fp8.first_last_layers_bf16 = true;
  EXPECT_DOUBLE_EQ(fp8_layer_share(m, l), 0.5);
  ops = micro_batch_ops(m, l);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kFp8LinearFwd), layer_fwd / 2);
  EXPECT_DOUBLE_EQ(sum_work(ops, OpKind::kLinearFwd), layer_fwd / 2 + head_fwd);
  EXPECT_DOUBLE_EQ(weight_casts(step_ops(m, l)), layers / 2 * (3 * C * C + C * C + 2 * C * F) / 2);
  m.fp8.format = config::Fp8Format::None;
  EXPECT_DOUBLE_EQ(weight_casts(step_ops(m, l)), 0.0);
  EXPECT_DOUBLE_EQ(sum_work(micro_batch_ops(m, l), OpKind::kFp8LinearFwd), 0.0);
}

// A profile that timed only bf16 linears (the shipped one, a cache from
// before FP8) takes an FP8 linear at kFp8GemmSpeedup times the bf16 fit's
// rate; once FP8 linears are timed, their own fit.
TEST(OpProfile, Fp8LinearWithoutItsFitTakesTheBf16FitAtTheFp8Gain) {
  OpProfile p;
  const double rate = 5e14, over = 7e-6, fp8_rate = 9e14;
  OpShape o;
  for (int64_t n : {1024, 4096}) {
    o.kind = OpKind::kLinearFwd;
    o.d[0] = n, o.d[1] = 768, o.d[2] = 2304;
    p.measured[o.key()] = o.work() / rate + over;
  }
  p.refit();
  OpShape f;
  f.kind = OpKind::kFp8LinearBwd;
  f.d[0] = 2048, f.d[1] = 768, f.d[2] = 3072;
  bool ok = true;
  EXPECT_NEAR(p.seconds(f, &ok), f.work() / (rate * kFp8GemmSpeedup) + over, 1e-15);
  EXPECT_TRUE(ok);
  for (int64_t n : {1024, 8192}) {
    o.kind = OpKind::kFp8LinearFwd;
    o.d[0] = n;
    p.measured[o.key()] = o.work() / fp8_rate;
  }
  p.refit();
  EXPECT_NEAR(p.seconds(f) / (f.work() / fp8_rate), 1.0, 1e-9);
  EXPECT_EQ(parse_op_key(f.key())->kind, OpKind::kFp8LinearBwd);  // the key names the kind
}

TEST(OpProfile, SequenceParallelShardsTheNormRows) {
  const GptConfig m = gpt(2, 64, 4);
  Layout l = layout(2, 2);
  l.micro_batch = 2;
  auto rows_of_norm = [&](const Layout& lay) {
    for (const auto& c : micro_batch_ops(m, lay))
      if (c.op.kind == OpKind::kNormFwd) return c.op.d[0];
    return int64_t(-1);
  };
  EXPECT_EQ(rows_of_norm(l), 512);
  l.sequence_parallel = true;
  EXPECT_EQ(rows_of_norm(l), 256);
}

TEST(OpProfile, OptimizerShardFollowsTheDistributedOptimizer) {
  const GptConfig m = gpt(2, 64, 4);
  Layout l = layout(4);
  const int64_t p = params_on_stage(m, 1, 1, 0);
  EXPECT_EQ(step_ops(m, l)[0].op.d[0], p);
  l.distributed_optimizer = true;
  EXPECT_EQ(step_ops(m, l)[0].op.d[0], (p + 3) / 4);
}

TEST(OpProfile, RefitRecoversRateAndOverheadAndMeasuredTimesWin) {
  OpProfile p;
  const double rate = 5e14, over = 7e-6;
  for (int64_t n : {1024, 4096, 16384}) {
    OpShape o;
    o.kind = OpKind::kLinearFwd;
    o.d[0] = n, o.d[1] = 768, o.d[2] = 2304;
    p.measured[o.key()] = o.work() / rate + over;
  }
  p.refit();
  ASSERT_EQ(p.fits.at(OpClass::kLinear).points, 3);
  EXPECT_NEAR(p.fits.at(OpClass::kLinear).rate / rate, 1.0, 1e-9);
  EXPECT_NEAR(p.fits.at(OpClass::kLinear).overhead_s, over, 1e-12);

  OpShape other;  // not measured: the fit
  other.kind = OpKind::kLinearBwd;
  other.d[0] = 2048, other.d[1] = 768, other.d[2] = 768;
  EXPECT_NEAR(p.seconds(other), other.work() / rate + over, 1e-15);
  p.measured[other.key()] = 1.0;  // measured: that number
  EXPECT_EQ(p.seconds(other), 1.0);
  OpShape att;  // no fit of its class
  att.kind = OpKind::kAttentionFwd;
  att.d[0] = 1, att.d[1] = 64, att.d[2] = 2, att.d[3] = 32;
  bool ok = true;
  EXPECT_EQ(p.seconds(att, &ok), 0.0);
  EXPECT_FALSE(ok);
}

TEST(OpProfile, FileRoundTripsAndBadFilesNameThemselves) {
  OpProfile p;
  p.device = "NVIDIA H200";
  p.tripod_version = tripod_version();
  OpShape o;
  o.kind = OpKind::kAttentionBwd;
  o.d[0] = 8, o.d[1] = 1024, o.d[2] = 12, o.d[3] = 64;
  p.measured[o.key()] = 1.5e-4;
  p.refit();
  const OpProfile q = OpProfile::from_json(p.to_json(), "x.json");
  EXPECT_EQ(q.device, p.device);
  EXPECT_EQ(q.measured, p.measured);
  EXPECT_DOUBLE_EQ(q.fits.at(OpClass::kAttentionBwd).rate, p.fits.at(OpClass::kAttentionBwd).rate);

  try {
    OpProfile::from_json("{\"format\": 1, \"device\": 3", "/tmp/broken.json");
    FAIL() << "malformed JSON accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/tmp/broken.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(OpProfile::from_json("{\"format\": 99}", "f.json"), Error);

  // The cache is keyed by device and version: another version is ignored.
  const std::string dir = ::testing::TempDir() + "op_profile_cache";
  std::filesystem::remove_all(dir);
  ::setenv("TRIPOD_CACHE_DIR", dir.c_str(), 1);
  const std::string path = calibration_cache_path("NVIDIA H200");
  EXPECT_EQ(path, dir + "/plan/nvidia_h200.json");
  save_calibration(path, p);
  std::string why;
  ASSERT_TRUE(load_calibration(path, "NVIDIA H200", &why).has_value()) << why;
  EXPECT_FALSE(load_calibration(path, "NVIDIA H100", &why).has_value());
  p.tripod_version = "0.0.1+gdeadbeef";
  save_calibration(path, p);
  EXPECT_FALSE(load_calibration(path, "NVIDIA H200", &why).has_value());
  EXPECT_NE(why.find("0.0.1+gdeadbeef"), std::string::npos) << why;
  ::unsetenv("TRIPOD_CACHE_DIR");
}

TEST(OpProfile, ShippedH200CoversEveryOpClass) {
  const auto p = shipped_profile("NVIDIA H200");
  ASSERT_TRUE(p.has_value());
  const GptConfig m = gpt(12, 768, 12);
  Layout l = layout(1);
  l.micro_batch = 8;
  bool ok = true;
  const double t = p->seconds_of(micro_batch_ops(m, l), &ok) + p->seconds_of(step_ops(m, l), &ok);
  EXPECT_TRUE(ok);
  EXPECT_GT(t, 0);
  EXPECT_FALSE(shipped_profile("NVIDIA B200").has_value());
}

}  // namespace
}  // namespace tripod::plan
