// `tripod plan --calibrate`: time the ops a plan's layouts would run on this
// machine's device, with the real backend kernels. See plan/op_profile.h.
#include "plan/calibrate.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "base/error.h"
#include <nlohmann/json.hpp>
#include <fmt/format.h>

#include "base/log.h"

namespace tripod::plan {
namespace {

using backend::Backend;

// Seconds per call of `run` after one warm-up call (which also builds the
// cuDNN plans and cuBLASLt heuristics a training run would build once).
template <typename F>
double time_calls(Backend& be, int reps, F&& run) {
  run();
  be.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) run();
  be.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

// One f32 scale, amax or inverse on the device, in a 16-byte slot as
// Fp8State keeps them.
Tensor device_scalar(Backend& be, float v) {
  Tensor h = Tensor::empty({4}, DType::F32);
  for (int i = 0; i < 4; ++i) h.data<float>()[i] = v;
  Tensor t = be.empty({4}, DType::F32);
  be.copy(t, h);
  return t.flat(0, {1});
}

// The FP8 linear as model/fp8_meta.h's Fp8Linear runs it (hybrid: E4M3
// forward operands, E5M2 output gradients): forward casts x with its
// transpose and runs the FP8 GEMM (fast accumulation into the 16-bit
// output); backward casts dy and runs dgrad and wgrad (into the f32
// gradient); GELU unfused after the GEMM when d[3] = 1. The weight's codes
// are cast once, outside the timing (kFp8WeightCast times that cast).
template <typename Make>
double measure_fp8(Backend& be, const OpShape& op, int reps, DType act, Make&& make) {
  const int64_t a = op.d[0], b = op.d[1], c = op.d[2], gelu = op.d[3];
  auto scalar = [&](float v) { return device_scalar(be, v); };
  Tensor scale = scalar(64.f), scale_inv = scalar(1.f / 64.f), amax = scalar(0.f);
  if (op.kind == OpKind::kFp8WeightCast) {  // (out a, in b)
    Tensor w = make({a, b}, act), w8 = be.empty({a, b}, DType::E4M3), w8_t = be.empty({b, a}, DType::E4M3);
    return time_calls(be, reps, [&] { be.fp8_cast_transpose(w8, w8_t, amax, w, scale); });
  }
  Tensor w = make({c, b}, act), w8 = be.empty({c, b}, DType::E4M3), w8_t = be.empty({b, c}, DType::E4M3);
  be.fp8_cast_transpose(w8, w8_t, amax, w, scale);
  Tensor x8 = be.empty({a, b}, DType::E4M3), x8_t = be.empty({b, a}, DType::E4M3);
  if (op.kind == OpKind::kFp8LinearFwd) {  // (rows a, in b) -> (rows a, out c)
    Tensor x = make({a, b}, act), y = make({a, c}, act), pre = make({a, c}, act);
    return time_calls(be, reps, [&] {
      be.fp8_cast_transpose(x8, x8_t, amax, x, scale);
      be.fp8_matmul(gelu ? pre : y, x8, scale_inv, w8, scale_inv, nullptr, false, act != DType::F32);
      if (gelu) be.gelu_forward(y, pre);
    });
  }
  Tensor x = make({a, b}, act);
  be.fp8_cast_transpose(x8, x8_t, amax, x, scale);
  Tensor dy = make({a, c}, act), dx = make({a, b}, act), pre = make({a, b}, act), dw = make({c, b}, DType::F32);
  Tensor d8 = be.empty({a, c}, DType::E5M2), d8_t = be.empty({c, a}, DType::E5M2);
  return time_calls(be, reps, [&] {
    be.fp8_cast_transpose(d8, d8_t, amax, dy, scale);
    be.fp8_matmul(dx, d8, scale_inv, w8_t, scale_inv);
    be.fp8_matmul(dw, d8_t, scale_inv, x8_t, scale_inv, nullptr, true);
    if (gelu) be.gelu_backward(dx, pre, dx);
  });
}

// The block-scaled FP8 linear (--fp8-recipe blockwise) as Fp8Linear runs
// it with a kept input: forward casts x (rows a, in b) in 1x128 row blocks
// and, for wgrad, its transpose in 128-row column blocks (one
// fp8_block_cast), then the GEMM against the weight's 128x128 tiles;
// backward casts dy alike (E5M2), runs dgrad against W^T's tiles and
// wgrad on the two transposes' 1x128 blocks (into the f32 gradient). GELU
// unfused after the GEMM when d[3] = 1, no bias (as measure_fp8). The
// weight's tiles are cast once, outside the timing (kFp8BlockWeightCast
// times that cast). Scale arrays in backend/op_args.h's layouts.
template <typename Make>
double measure_fp8_block(Backend& be, const OpShape& op, int reps, DType act, Make&& make) {
  using backend::fp8_blocks;
  using backend::fp8_tile_ld;
  const int64_t a = op.d[0], b = op.d[1], c = op.d[2], gelu = op.d[3];
  auto scales = [&](int64_t n) { return be.empty({n}, DType::F32); };
  if (op.kind == OpKind::kFp8BlockWeightCast) {  // (out a, in b)
    Tensor w = make({a, b}, act), w8 = be.empty({a, b}, DType::E4M3), w8_t = be.empty({b, a}, DType::E4M3);
    Tensor ws = scales(fp8_blocks(a) * fp8_tile_ld(b)), ws_t = scales(fp8_blocks(b) * fp8_tile_ld(a));
    return time_calls(be, reps, [&] { be.fp8_block_cast_tiles(w8, w8_t, ws, ws_t, w); });
  }
  // W (out c, in b) and W^T in 128x128 tiles.
  Tensor w = make({c, b}, act), w8 = be.empty({c, b}, DType::E4M3), w8_t = be.empty({b, c}, DType::E4M3);
  Tensor ws = scales(fp8_blocks(c) * fp8_tile_ld(b)), ws_t = scales(fp8_blocks(b) * fp8_tile_ld(c));
  be.fp8_block_cast_tiles(w8, w8_t, ws, ws_t, w);
  // x's codes (a, b) with ceil(b/128) * a scales; the kept transpose (b, a) with ceil(a/128) * b.
  Tensor x8 = be.empty({a, b}, DType::E4M3), x8_t = be.empty({b, a}, DType::E4M3);
  Tensor xs = scales(fp8_blocks(b) * a), xs_t = scales(fp8_blocks(a) * b);
  if (op.kind == OpKind::kFp8BlockLinearFwd) {  // (rows a, in b) -> (rows a, out c)
    Tensor x = make({a, b}, act), y = make({a, c}, act), pre = make({a, c}, act);
    return time_calls(be, reps, [&] {
      be.fp8_block_cast(x8, xs, &x8_t, &xs_t, x);
      be.fp8_block_matmul(gelu ? pre : y, x8, xs, w8, ws, true);
      if (gelu) be.gelu_forward(y, pre);
    });
  }
  Tensor x = make({a, b}, act);
  be.fp8_block_cast(x8, xs, &x8_t, &xs_t, x);
  Tensor dy = make({a, c}, act), dx = make({a, b}, act), pre = make({a, b}, act), dw = make({c, b}, DType::F32);
  Tensor d8 = be.empty({a, c}, DType::E5M2), d8_t = be.empty({c, a}, DType::E5M2);
  Tensor ds = scales(fp8_blocks(c) * a), ds_t = scales(fp8_blocks(a) * c);
  return time_calls(be, reps, [&] {
    be.fp8_block_cast(d8, ds, &d8_t, &ds_t, dy);
    be.fp8_block_matmul(dx, d8, ds, w8_t, ws_t, true);
    be.fp8_block_matmul(dw, d8_t, ds_t, x8_t, xs_t, false, nullptr, true);
    if (gelu) be.gelu_backward(dx, pre, dx);
  });
}

// cuDNN's FP8 attention (--fp8-dot-product-attention) as Fp8Attention runs
// it: E4M3 qkv codes in, E4M3 output codes and the f32 lse out; backward from
// dout codes (E5M2, hybrid) to dqkv codes. Multi-head, as the bf16 attention
// ops are timed; the codes quantize random values in [0, 1).
template <typename Make>
double measure_fp8_attention(Backend& be, const OpShape& op, int reps, DType act, Make&& make) {
  const int64_t a = op.d[0], b = op.d[1], c = op.d[2], Cq = c * op.d[3];
  Tensor one = device_scalar(be, 1.f), amax = device_scalar(be, 0.f);
  auto codes = [&](const Shape& s, DType fp8) {
    Tensor x = make(s, act), q = be.empty(s, fp8);
    be.fp8_quantize(q, amax, x, one);
    return q;
  };
  backend::Fp8AttentionMeta m;
  m.qkv_scale_inv = m.o_scale_inv = m.dout_scale_inv = one;
  m.s_scale = device_scalar(be, 448.f), m.s_scale_inv = device_scalar(be, 1.f / 448.f);
  m.o_scale = m.dp_scale = m.dqkv_scale = device_scalar(be, 64.f);
  m.dp_scale_inv = device_scalar(be, 1.f / 64.f);
  m.s_amax = m.o_amax = m.dp_amax = m.dqkv_amax = amax;
  Tensor qkv = codes({a, b, 3 * Cq}, DType::E4M3), out = be.empty({a, b, Cq}, DType::E4M3);
  Tensor lse = be.empty({a, c, b}, DType::F32);
  if (op.kind == OpKind::kFp8AttentionFwd)
    return time_calls(be, reps, [&] { be.attention_fp8_forward(out, lse, qkv, m, int(c)); });
  be.attention_fp8_forward(out, lse, qkv, m, int(c));
  Tensor dout = codes({a, b, Cq}, DType::E5M2), dqkv = be.empty({a, b, 3 * Cq}, DType::E5M2);
  return time_calls(be, reps, [&] { be.attention_fp8_backward(dqkv, dout, qkv, out, lse, m, int(c)); });
}

double measure(Backend& be, const OpShape& op, int reps) {
  // 16-bit ops in bf16; a backend without 16-bit compute (the CPU) runs
  // them in f32, as its training runs do.
  DType act = op.act_bytes == 4 ? DType::F32 : DType::BF16;
  if (!be.computes_in(act)) act = DType::F32;
  // Random values in [0, 1), not zeros: a GPU's clocks under its power cap
  // depend on the data (a GEMM of zeros runs measurably faster).
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto make = [&](const Shape& s, DType d) {
    Tensor t = be.empty(s, d);
    Tensor h = Tensor::empty(s, d);
    const int64_t n = h.numel();
    auto next = [&] {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      return float(state >> 40) / float(1ull << 24);
    };
    if (d == DType::F32) {
      for (int64_t i = 0; i < n; ++i) h.data<float>()[i] = next();
    } else if (d == DType::BF16 || d == DType::F16) {
      auto* p = h.data_u16();
      for (int64_t i = 0; i < n; ++i) p[i] = d == DType::BF16 ? f32_to_bf16(next()) : f32_to_f16(next());
    } else {
      be.zero(t);  // ids (targets): 0 is in range
      return t;
    }
    be.copy(t, h);
    return t;
  };
  const int64_t a = op.d[0], b = op.d[1], c = op.d[2], d = op.d[3];
  switch (op.kind) {
    case OpKind::kLinearFwd: {  // (rows a, in b) x (out c, in b)^T + bias (+ GELU when d = 1)
      Tensor x = make({a, b}, act), w = make({c, b}, act), bias = make({c}, act), y = make({a, c}, act);
      if (d == 1) {
        Tensor pre = make({a, c}, act);
        return time_calls(be, reps, [&] { be.matmul_forward_gelu(y, pre, x, w, &bias); });
      }
      return time_calls(be, reps, [&] { be.matmul_forward(y, x, w, &bias); });
    }
    case OpKind::kLinearBwd: {
      Tensor x = make({a, b}, act), w = make({c, b}, act), dy = make({a, c}, act), dx = make({a, b}, act);
      Tensor dw = make({c, b}, DType::F32), db = make({c}, DType::F32);
      if (d == 1) {  // the input is the GELU output; its pre-activation is (rows, in)
        Tensor pre = make({a, b}, act);
        return time_calls(be, reps, [&] { be.matmul_backward_dgelu(dx, &dw, &db, dy, x, w, pre); });
      }
      return time_calls(be, reps, [&] { be.matmul_backward(&dx, &dw, &db, dy, x, w); });
    }
    case OpKind::kAttentionFwd:
    case OpKind::kAttentionBwd: {  // batch a, seq b, heads c, head size d; qkv (B*T, 3*NH*HS)
      const int64_t Cq = c * d;
      Tensor qkv = make({a, b, 3 * Cq}, act), out = make({a, b, Cq}, act), lse = make({a, c, b}, DType::F32);
      if (op.kind == OpKind::kAttentionFwd)
        return time_calls(be, reps, [&] { be.attention_forward(out, lse, qkv, int(c)); });
      be.attention_forward(out, lse, qkv, int(c));
      Tensor dout = make({a, b, Cq}, act), dqkv = make({a, b, 3 * Cq}, act);
      return time_calls(be, reps, [&] { be.attention_backward(dqkv, dout, qkv, out, lse, int(c)); });
    }
    case OpKind::kNormFwd: {
      Tensor x = make({a, b}, act), y = make({a, b}, act), res = make({a, b}, act), out = make({a, b}, act);
      Tensor w = make({b}, DType::F32), bias = make({b}, DType::F32);
      Tensor mean = make({a}, DType::F32), rstd = make({a}, DType::F32);
      return time_calls(be, reps,
                        [&] { be.fused_residual_layernorm_forward(res, out, mean, rstd, x, y, w, bias, 1e-5f); });
    }
    case OpKind::kNormBwd: {
      Tensor x = make({a, b}, act), out = make({a, b}, act), dout = make({a, b}, act), dx = make({a, b}, act);
      Tensor w = make({b}, DType::F32), bias = make({b}, DType::F32), dw = make({b}, DType::F32),
             db = make({b}, DType::F32), mean = make({a}, DType::F32), rstd = make({a}, DType::F32);
      return time_calls(be, reps,
                        [&] { be.layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, &out, &bias); });
    }
    case OpKind::kAdd: {
      Tensor x = make({a, b}, act), y = make({a, b}, act), out = make({a, b}, act);
      return time_calls(be, reps, [&] { be.add(out, x, y); });
    }
    case OpKind::kCrossEntropy: {
      Tensor logits = make({a, b}, act), dlogits = make({a, b}, act), losses = make({a}, DType::F32);
      Tensor targets = make({a}, DType::I32);
      return time_calls(be, reps, [&] { be.cross_entropy_fused(losses, &dlogits, logits, targets, 1.f / a); });
    }
    case OpKind::kAdamW: {
      Tensor p = make({a}, DType::F32), g = make({a}, DType::F32), m = make({a}, DType::F32),
             v = make({a}, DType::F32), copy = make({a}, act);
      backend::AdamWStep step;
      step.lr = 1e-4f;
      return time_calls(be, reps, [&] { be.adamw_update(p, g, m, v, step, act == DType::F32 ? nullptr : &copy); });
    }
    case OpKind::kGradNorm: {
      Tensor g = make({a}, DType::F32), sq = make({1}, DType::F32);
      return time_calls(be, reps, [&] {
        be.sum_squares(sq, g);
        be.zero(g);
      });
    }
    case OpKind::kFp8LinearFwd:
    case OpKind::kFp8LinearBwd:
    case OpKind::kFp8WeightCast:
      return measure_fp8(be, op, reps, act, make);
    case OpKind::kFp8BlockLinearFwd:
    case OpKind::kFp8BlockLinearBwd:
    case OpKind::kFp8BlockWeightCast:
      return measure_fp8_block(be, op, reps, act, make);
    case OpKind::kFp8AttentionFwd:
    case OpKind::kFp8AttentionBwd:
      return measure_fp8_attention(be, op, reps, act, make);
  }
  return 0;
}

}  // namespace

std::vector<OpShape> ops_of_fitting_layouts(const GptConfig& m, Machine mc, const SearchOptions& o,
                                            const OpProfile* profile) {
  mc.ops = profile;
  const PlanResult pr = plan_layouts(m, mc, o);
  std::set<OpShape> uniq;
  for (size_t i = 0; i < std::min<size_t>(pr.fits.size(), 64); ++i)
    for (const auto& list : {micro_batch_ops(m, pr.fits[i].layout), step_ops(m, pr.fits[i].layout)})
      for (const auto& c : list) uniq.insert(c.op);
  return std::vector<OpShape>(uniq.begin(), uniq.end());
}

std::string device_model_name(const Backend& be) {
  const std::string n = be.name();  // "cpu" or "cuda:0 (NVIDIA H200)"
  const auto l = n.find('('), r = n.rfind(')');
  return l != std::string::npos && r != std::string::npos && r > l ? n.substr(l + 1, r - l - 1) : n;
}

int calibrate_ops(Backend& be, const std::vector<OpShape>& ops, OpProfile& profile) {
  const int reps = be.device().is_cpu() ? 1 : 3;
  int n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const OpShape& op : ops) {
    if (profile.has(op)) continue;
    // FP8 attention the backend does not serve here (cuDNN before 9.19, a
    // head size other than 128 on Hopper) stays unmeasured: it is timed as
    // the bf16 attention at the usual gain (OpProfile::seconds).
    const bool fp8_attention = op.kind == OpKind::kFp8AttentionFwd || op.kind == OpKind::kFp8AttentionBwd;
    if (const std::string why = fp8_attention ? be.fp8_attention_note(op.d[3]) : ""; !why.empty()) {
      log::info("plan: {} not measured, taken as the bf16 attention at {:g}x: {}", op.key(),
                op.kind == OpKind::kFp8AttentionFwd ? kFp8AttentionFwdSpeedup : kFp8AttentionBwdSpeedup, why);
      continue;
    }
    profile.measured[op.key()] = measure(be, op, reps);
    ++n;
  }
  profile.refit();
  if (n > 0)
    log::info("plan: measured {} op shapes on {} in {:.1f} s", n, be.name(),
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return n;
}

OpTimesChoice resolve_op_times(const std::string& op_times, bool calibrate, const std::string& device,
                               const DeviceOpener& open_device,
                               const std::function<std::vector<OpShape>(const OpProfile*)>& shapes_needed,
                               bool explain_missing_cache) {
  OpTimesChoice c;
  if (!calibrate && op_times == "assumed") {
    c.note = "op times: none (--op-times assumed): compute = FLOPs / (peak x --assumed-mfu x size factor)";
    return c;
  }
  if (!calibrate && op_times != "auto") {
    if (auto shipped = shipped_profile(op_times)) {
      c.profile = std::move(shipped);
    } else {
      std::ifstream in(op_times);
      TRIPOD_CHECK_HINT(in.good(), "pass auto, assumed, h200 or the path of a file `tripod plan --calibrate` wrote",
                        "--op-times {}: no such file and no shipped op times of that name", op_times);
      std::stringstream ss;
      ss << in.rdbuf();
      c.profile = OpProfile::from_json(ss.str(), op_times);
      c.profile->origin = "from " + op_times + " (measured on " + c.profile->device + ")";
    }
    c.note = "op times: " + c.profile->origin;
    return c;
  }
  // auto or --calibrate: this machine's device and its cache (a broken or
  // stale cache is named in the note, never fatal).
  std::unique_ptr<backend::Backend> be;
  std::string name = "cpu";
  if (device != "cpu" || calibrate) {
    be = open_device(device);
    name = device_model_name(*be);
  }
  const std::string path = calibration_cache_path(name);
  std::string why;
  c.profile = load_calibration(path, name, &why);
  if (calibrate) {
    if (!c.profile) {
      if (std::filesystem::exists(path)) log::info("plan: {}", why);
      c.profile = OpProfile{};
      c.profile->device = name;
      c.profile->tripod_version = tripod_version();
    }
    // The ops of the layouts that fit under the current times; measuring
    // them can reorder the layouts, so look again with the new times.
    for (int round = 0; round < 2; ++round) {
      const OpProfile* current = c.profile->measured.empty() ? nullptr : &*c.profile;
      if (calibrate_ops(*be, shapes_needed(current), *c.profile) == 0) break;
    }
    save_calibration(path, *c.profile);
    c.profile->origin = fmt::format("measured on this machine ({}, {} ops; cached in {})", name,
                                    c.profile->measured.size(), path);
    c.note = "op times: " + c.profile->origin;
    return c;
  }
  if (c.profile) {
    c.note = "op times: " + c.profile->origin;
    return c;
  }
  c.profile = shipped_profile("h200");
  c.note = "op times: " + c.profile->origin;
  if (explain_missing_cache || std::filesystem::exists(path)) c.note += " (" + why + ")";
  return c;
}

std::string apply_link_files(const std::vector<std::string>& files, double& intra_node_gbs, double& inter_node_gbs,
                             double* intra_a2a_gbs, double* inter_a2a_gbs) {
  std::string intra = fmt::format("{:.0f} GB/s intra-node assumed", intra_node_gbs);
  std::string inter = fmt::format("{:.0f} GB/s inter-node assumed", inter_node_gbs);
  for (const std::string& f : files) {
    std::ifstream in(f);
    TRIPOD_CHECK_HINT(in.good(), "write it with `tripod bench comm --links-out FILE` under your launcher",
                      "--links {}: cannot read the file", f);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    TRIPOD_CHECK_HINT(!j.is_discarded() && j.is_object() && j.value("format", 0) == 1 && j.contains("busbw_gbs") &&
                          j["busbw_gbs"].is_number() && j.contains("spans_nodes") && j.contains("group_size"),
                      "write it again with `tripod bench comm --links-out FILE`",
                      "--links {}: not a file of `tripod bench comm --links-out`", f);
    const double bw = j["busbw_gbs"].get<double>();
    const int n = j["group_size"].get<int>();
    TRIPOD_CHECK_HINT(bw > 0 && n > 1, "measure over a group of 2 or more ranks (--group world under the launcher)",
                      "--links {}: a bandwidth of {} GB/s over {} rank(s) says nothing about a link", f, bw, n);
    const std::string what = fmt::format("{:.1f} GB/s {} measured ({}: all_reduce of {} B over {} ranks)", bw,
                                         j["spans_nodes"].get<bool>() ? "inter-node" : "intra-node", f,
                                         j.value("bytes", int64_t(0)), n);
    // The all_to_all's figure, when the bench ran it.
    double a2a = 0;
    if (j.contains("all_to_all") && j["all_to_all"].is_object() && j["all_to_all"].contains("busbw_gbs") &&
        j["all_to_all"]["busbw_gbs"].is_number())
      a2a = j["all_to_all"]["busbw_gbs"].get<double>();
    const std::string a2a_note = a2a > 0 ? fmt::format(", all_to_all {:.1f} GB/s", a2a) : "";
    if (j["spans_nodes"].get<bool>()) {
      inter_node_gbs = bw;
      inter = what + a2a_note;
      if (a2a > 0 && inter_a2a_gbs) *inter_a2a_gbs = a2a;
    } else {
      intra_node_gbs = bw;
      intra = what + a2a_note;
      if (a2a > 0 && intra_a2a_gbs) *intra_a2a_gbs = a2a;
    }
  }
  return fmt::format("communication: bus bandwidths {}; {}{}", intra, inter,
                     files.empty() ? " (measure them with `tripod bench comm --links-out FILE`, then --links FILE)"
                                   : "");
}

}  // namespace tripod::plan
