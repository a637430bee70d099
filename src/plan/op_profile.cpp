// Per-op times of a device. See plan/op_profile.h.
#include "plan/op_profile.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/op_args.h"
#include "base/error.h"

#ifndef TRIPOD_VERSION_STRING
#define TRIPOD_VERSION_STRING "unknown"
#endif

namespace tripod::plan {
namespace fs = std::filesystem;
namespace {

struct KindName {
  OpKind kind;
  const char* name;
};
constexpr KindName kKinds[] = {
    {OpKind::kLinearFwd, "linear_fwd"},       {OpKind::kLinearBwd, "linear_bwd"},
    {OpKind::kAttentionFwd, "attention_fwd"}, {OpKind::kAttentionBwd, "attention_bwd"},
    {OpKind::kNormFwd, "norm_fwd"},           {OpKind::kNormBwd, "norm_bwd"},
    {OpKind::kAdd, "add"},                    {OpKind::kCrossEntropy, "cross_entropy"},
    {OpKind::kAdamW, "adamw"},               {OpKind::kGradNorm, "grad_norm"},
    {OpKind::kFp8LinearFwd, "fp8_linear_fwd"}, {OpKind::kFp8LinearBwd, "fp8_linear_bwd"},
    {OpKind::kFp8WeightCast, "fp8_weight_cast"},
    {OpKind::kFp8BlockLinearFwd, "fp8_block_linear_fwd"}, {OpKind::kFp8BlockLinearBwd, "fp8_block_linear_bwd"},
    {OpKind::kFp8BlockWeightCast, "fp8_block_weight_cast"},
    {OpKind::kFp8AttentionFwd, "fp8_attention_fwd"}, {OpKind::kFp8AttentionBwd, "fp8_attention_bwd"},
};
constexpr std::pair<OpClass, const char*> kClasses[] = {{OpClass::kLinear, "linear"},
                                                       {OpClass::kAttentionFwd, "attention_fwd"},
                                                       {OpClass::kAttentionBwd, "attention_bwd"},
                                                       {OpClass::kMemory, "memory"},
                                                       {OpClass::kFp8Linear, "fp8_linear"},
                                                       {OpClass::kFp8BlockLinear, "fp8_block_linear"},
                                                       {OpClass::kFp8AttentionFwd, "fp8_attention_fwd"},
                                                       {OpClass::kFp8AttentionBwd, "fp8_attention_bwd"}};

const char* kind_name(OpKind k) {
  for (const auto& e : kKinds)
    if (e.kind == k) return e.name;
  return "?";
}

std::optional<OpShape> parse_key(const std::string& key) {
  std::istringstream is(key);
  std::string kind, dims, dtype;
  if (!(is >> kind >> dims >> dtype)) return std::nullopt;
  OpShape op;
  bool found = false;
  for (const auto& e : kKinds)
    if (kind == e.name) op.kind = e.kind, found = true;
  if (!found) return std::nullopt;
  op.act_bytes = dtype == "f32" ? 4 : 2;
  std::istringstream ds(dims);
  std::string item;
  for (int i = 0; i < 4 && std::getline(ds, item, 'x'); ++i) op.d[i] = std::atoll(item.c_str());
  return op;
}

}  // namespace

std::optional<OpShape> parse_op_key(const std::string& key) { return parse_key(key); }

std::string OpShape::key() const {
  int n = 4;
  while (n > 1 && d[n - 1] == 0) --n;
  std::string dims;
  for (int i = 0; i < n; ++i) {  // appended piece by piece: GCC 12 warns (-Wrestrict) on "x" + string
    if (i) dims += 'x';
    dims += std::to_string(d[i]);
  }
  return fmt::format("{} {} {}", kind_name(kind), dims, act_bytes == 4 ? "f32" : "16bit");
}

OpClass OpShape::op_class() const {
  switch (kind) {
    case OpKind::kLinearFwd:
    case OpKind::kLinearBwd: return OpClass::kLinear;
    case OpKind::kAttentionFwd: return OpClass::kAttentionFwd;
    case OpKind::kAttentionBwd: return OpClass::kAttentionBwd;
    case OpKind::kFp8LinearFwd:
    case OpKind::kFp8LinearBwd: return OpClass::kFp8Linear;
    case OpKind::kFp8BlockLinearFwd:
    case OpKind::kFp8BlockLinearBwd: return OpClass::kFp8BlockLinear;
    case OpKind::kFp8AttentionFwd: return OpClass::kFp8AttentionFwd;
    case OpKind::kFp8AttentionBwd: return OpClass::kFp8AttentionBwd;
    default: return OpClass::kMemory;
  }
}

double OpShape::work() const {
  const double a = double(d[0]), b = double(d[1]), c = double(d[2]), e = double(d[3]), s = act_bytes;
  switch (kind) {
    case OpKind::kLinearFwd: return 2 * a * b * c;
    case OpKind::kLinearBwd: return 4 * a * b * c;       // d input and d weight
    case OpKind::kAttentionFwd: return 2 * a * c * b * b * e;  // causal: half of 4 B NH T^2 HS
    case OpKind::kAttentionBwd: return 5 * a * c * b * b * e;  // 2.5x the forward
    case OpKind::kFp8AttentionFwd: return 2 * a * c * b * b * e;
    case OpKind::kFp8AttentionBwd: return 5 * a * c * b * b * e;
    case OpKind::kNormFwd: return 4 * a * b * s;         // read x, y; write residual, out
    case OpKind::kNormBwd: return 5 * a * b * s;         // read dout, inp, dinp; write dinp, out
    case OpKind::kAdd: return 3 * a * b * s;
    case OpKind::kCrossEntropy: return 2 * a * b * s;    // read logits, write d logits
    case OpKind::kAdamW: return a * (28 + s);            // f32 p, g, m, v in; p, m, v out; compute copy
    case OpKind::kGradNorm: return 8 * a;                // read the f32 gradients, then zero them
    case OpKind::kFp8LinearFwd: return 2 * a * b * c;
    case OpKind::kFp8LinearBwd: return 4 * a * b * c;
    case OpKind::kFp8WeightCast: return (s + 2) * a * b;  // read the compute copy; write W and W^T codes
    case OpKind::kFp8BlockLinearFwd: return 2 * a * b * c;
    case OpKind::kFp8BlockLinearBwd: return 4 * a * b * c;
    case OpKind::kFp8BlockWeightCast:  // as kFp8WeightCast, plus the f32 scale_inv of W's and W^T's tiles
      return (s + 2) * a * b +
             4.0 * double(backend::fp8_blocks(d[0]) * backend::fp8_tile_ld(d[1]) +
                          backend::fp8_blocks(d[1]) * backend::fp8_tile_ld(d[0]));
  }
  return 0;
}

std::vector<OpCount> micro_batch_ops(const GptConfig& m, const Layout& l) {
  const int64_t N = l.micro_batch * m.seq_length, Nsp = l.sp() ? N / l.tp : N;
  const int64_t C = m.hidden_size, Ctp = C / l.tp, Ftp = m.ffn_hidden_size / l.tp, NHtp = m.num_attention_heads / l.tp;
  const int64_t HS = C / m.num_attention_heads, Vtp = m.padded_vocab_size(l.tp) / l.tp;
  const int64_t Qtp = m.qkv_width() / l.tp, F1tp = m.fc1_width() / l.tp;  // (NH + 2G) HS; 2F with SwiGLU
  const int s = l.dtype == DType::F32 ? 4 : 2;
  const double layers = double(m.num_layers) / l.pp;
  auto op = [&](OpKind k, int64_t a, int64_t b, int64_t c = 0, int64_t d = 0) {
    OpShape o;
    o.kind = k;
    o.d[0] = a, o.d[1] = b, o.d[2] = c, o.d[3] = d;
    o.act_bytes = s;
    return o;
  };
  // model/transformer_layer.cpp, layer_forward and layer_backward; with GELU
  // fc1 carries it as an epilogue and fc2's backward the GELU backward
  // (SwiGLU's gate is a separate memory-bound pass, counted as an add).
  const int64_t gelu = m.swiglu ? 0 : 1;
  const double fp8 = fp8_layer_share(m, l);  // of the stage's layers, the FP8 ones
  const std::vector<OpShape> fwd = {
      op(OpKind::kNormFwd, Nsp, C),          op(OpKind::kLinearFwd, N, C, Qtp),
      op(OpKind::kAttentionFwd, l.micro_batch, m.seq_length, NHtp, HS),
      op(OpKind::kLinearFwd, N, Ctp, C),     op(OpKind::kNormFwd, Nsp, C),
      op(OpKind::kLinearFwd, N, C, F1tp, gelu), op(OpKind::kLinearFwd, N, Ftp, C),
      op(OpKind::kAdd, Nsp, C)};
  const std::vector<OpShape> bwd = {
      op(OpKind::kLinearBwd, N, Ftp, C, gelu), op(OpKind::kLinearBwd, N, C, F1tp),
      op(OpKind::kNormBwd, Nsp, C),          op(OpKind::kLinearBwd, N, Ctp, C),
      op(OpKind::kAttentionBwd, l.micro_batch, m.seq_length, NHtp, HS),
      op(OpKind::kLinearBwd, N, C, Qtp),     op(OpKind::kNormBwd, Nsp, C)};
  std::map<std::string, OpCount> acc;
  auto add = [&](const OpShape& o, double n) {
    auto [it, fresh] = acc.try_emplace(o.key(), OpCount{o, 0});
    it->second.count += n;
  };
  // An FP8 layer's linears run as their FP8 kinds (same shapes): the
  // block-scaled ones under --fp8-recipe blockwise.
  // Under --no-fp8-wgrad an FP8 linear's backward is the FP8 dgrad, dx (rows,
  // in) = dy (rows, out) W, and the weight gradient in the compute dtype,
  // dW = dy^T x. Both are taken as existing kinds, approximately:
  //   - the dgrad as the FP8 forward kind of shape (rows, out -> in) (the
  //     same GEMM, dy's codes against W^T's, and a cast of dy; the forward
  //     kind's cast also writes a transpose this one does not, a memory-bound
  //     overcount; with GELU its GELU forward pass over the (rows, in)
  //     output stands in for the GELU backward over the same tensor);
  //   - the wgrad as half a bf16 kLinearBwd of the linear's shape (which
  //     times dgrad + wgrad + the bias gradient: two GEMMs of equal FLOPs,
  //     so half of it is the wgrad's 2 rows in out FLOPs and half a bias
  //     gradient), without its GELU backward.
  // (The forward's cast also writes no transpose under --no-fp8-wgrad, but
  // stays the FP8 forward kind: the same overcount.)
  const bool block = m.fp8.blockwise(), fp8_wgrad = m.fp8.fp8_wgrad();
  const OpKind fp8_fwd = block ? OpKind::kFp8BlockLinearFwd : OpKind::kFp8LinearFwd;
  const OpKind fp8_bwd = block ? OpKind::kFp8BlockLinearBwd : OpKind::kFp8LinearBwd;
  const bool fp8_attention = m.fp8.dot_product_attention;
  auto add_layer_op = [&](const OpShape& o, double n) {
    const bool linear = o.kind == OpKind::kLinearFwd || o.kind == OpKind::kLinearBwd;
    const bool attention = fp8_attention && (o.kind == OpKind::kAttentionFwd || o.kind == OpKind::kAttentionBwd);
    if ((!linear && !attention) || fp8 <= 0) return add(o, n);
    if (fp8 < 1) add(o, n * (1 - fp8));
    OpShape f = o;
    if (attention) {
      f.kind = o.kind == OpKind::kAttentionFwd ? OpKind::kFp8AttentionFwd : OpKind::kFp8AttentionBwd;
    } else if (o.kind == OpKind::kLinearFwd) {
      f.kind = fp8_fwd;
    } else if (fp8_wgrad) {
      f.kind = fp8_bwd;
    } else {
      OpShape dgrad = o;
      dgrad.kind = fp8_fwd;
      std::swap(dgrad.d[1], dgrad.d[2]);  // (rows, out) -> (rows, in); d[3] (GELU) stays
      add(dgrad, n * fp8);
      f.d[3] = 0;  // the bf16 wgrad: half a linear_bwd without GELU
      n *= 0.5;
    }
    add(f, n * fp8);
  };
  for (const auto& o : fwd) add_layer_op(o, l.recompute == Recompute::Full ? 2 * layers : layers);
  for (const auto& o : bwd) add_layer_op(o, layers);
  if (l.recompute == Recompute::Selective) add_layer_op(fwd[2], layers);  // the attention core again
  // The busiest stage is the last: final LayerNorm, then the LM head and
  // cross-entropy in row chunks of at most 1 GiB of logits (gpt_model.cpp,
  // head_chunk_rows); with one stage the embedding too (an add each way).
  add(op(OpKind::kNormFwd, Nsp, C), 1);
  add(op(OpKind::kNormBwd, Nsp, C), 1);
  const int64_t rows = config::head_chunk_rows(N, Vtp, s);
  for (int64_t done = 0; done < N; done += rows) {
    const int64_t r = std::min(rows, N - done);
    add(op(OpKind::kLinearFwd, r, C, Vtp), 1);
    add(op(OpKind::kLinearBwd, r, C, Vtp), 1);
    add(op(OpKind::kCrossEntropy, r, Vtp), 1);
  }
  if (l.pp == 1) add(op(OpKind::kAdd, Nsp, C), 2);
  std::vector<OpCount> out;
  for (auto& [k, c] : acc) out.push_back(c);
  return out;
}

std::vector<OpCount> step_ops(const GptConfig& m, const Layout& l) {
  const int64_t params = std::max(params_on_stage(m, l.tp, l.pp, 0), params_on_stage(m, l.tp, l.pp, l.pp - 1));
  OpShape adam, norm;
  adam.kind = OpKind::kAdamW;
  adam.d[0] = l.distributed_optimizer ? (params + l.dp - 1) / l.dp : params;
  adam.act_bytes = norm.act_bytes = l.dtype == DType::F32 ? 4 : 2;
  // The grad norm reads this rank's gradient shard; every gradient is zeroed.
  norm.kind = OpKind::kGradNorm;
  norm.d[0] = params;
  std::vector<OpCount> out = {OpCount{adam, 1}, OpCount{norm, 1}};
  // Each FP8 linear casts its weight (and transpose) once per step: qkv,
  // proj, fc1, fc2 as this tp rank holds them (out, in); in 128x128 tiles
  // under --fp8-recipe blockwise.
  const double fp8_layers = fp8_layer_share(m, l) * double(m.num_layers) / l.pp;
  if (fp8_layers > 0) {
    const int64_t C = m.hidden_size, tp = l.tp;
    const int64_t shapes[4][2] = {{m.qkv_width() / tp, C}, {C, C / tp}, {m.fc1_width() / tp, C},
                                  {C, m.ffn_hidden_size / tp}};
    for (const auto& sh : shapes) {
      OpShape w;
      w.kind = m.fp8.blockwise() ? OpKind::kFp8BlockWeightCast : OpKind::kFp8WeightCast;
      w.d[0] = sh[0], w.d[1] = sh[1];
      w.act_bytes = adam.act_bytes;
      out.push_back(OpCount{w, fp8_layers});
    }
  }
  return out;
}

double fp8_layer_share(const GptConfig& m, const Layout& l) {
  if (!m.fp8.enabled()) return 0;
  // The last pipeline rank's layers: chunk c of vpp holds model chunk c pp + (pp - 1).
  const int64_t chunk_layers = std::max<int64_t>(1, m.num_layers / (int64_t(l.pp) * l.vpp));
  int64_t all = 0, fp8 = 0;
  for (int c = 0; c < l.vpp; ++c)
    for (int64_t i = (int64_t(c) * l.pp + l.pp - 1) * chunk_layers, e = std::min(i + chunk_layers, m.num_layers);
         i < e; ++i) {
      ++all;
      fp8 += m.layer_spec(i).fp8 ? 1 : 0;
    }
  return all ? double(fp8) / double(all) : 0.0;
}

double OpProfile::seconds(const OpShape& op, bool* ok) const {
  if (auto it = measured.find(op.key()); it != measured.end()) return it->second;
  const OpClass cls = op.op_class();
  auto f = fits.find(cls);
  if (f == fits.end() || f->second.rate <= 0) {
    // Only the compute-dtype op timed: its fit at the FP8 form's usual gain.
    OpClass base = cls;
    double gain = 1;
    switch (cls) {
      case OpClass::kFp8Linear: base = OpClass::kLinear, gain = kFp8GemmSpeedup; break;
      case OpClass::kFp8BlockLinear: base = OpClass::kLinear, gain = kFp8BlockGemmSpeedup; break;
      case OpClass::kFp8AttentionFwd: base = OpClass::kAttentionFwd, gain = kFp8AttentionFwdSpeedup; break;
      case OpClass::kFp8AttentionBwd: base = OpClass::kAttentionBwd, gain = kFp8AttentionBwdSpeedup; break;
      default: break;
    }
    auto b = fits.find(base);
    if (base != cls && b != fits.end() && b->second.rate > 0)
      return op.work() / (b->second.rate * gain) + b->second.overhead_s;
  }
  if (f == fits.end() || f->second.rate <= 0) {
    if (ok) *ok = false;
    return 0;
  }
  return op.work() / f->second.rate + f->second.overhead_s;
}

double OpProfile::seconds_of(const std::vector<OpCount>& ops, bool* ok) const {
  double t = 0;
  for (const auto& c : ops) t += c.count * seconds(c.op, ok);
  return t;
}

int OpProfile::measured_count(const std::vector<OpCount>& ops) const {
  int n = 0;
  for (const auto& c : ops) n += has(c.op) ? 1 : 0;
  return n;
}

void OpProfile::refit() {
  std::map<OpClass, std::vector<std::pair<double, double>>> pts;  // (work, seconds)
  for (const auto& [key, sec] : measured)
    if (auto op = parse_key(key); op && sec > 0) pts[op->op_class()].push_back({op->work(), sec});
  fits.clear();
  for (auto& [cls, p] : pts) {
    // Ordinary least squares of seconds on work; a negative intercept (or
    // one point) falls back to a line through the origin.
    const double n = double(p.size());
    double sw = 0, st = 0, sww = 0, swt = 0;
    for (auto [w, t] : p) sw += w, st += t, sww += w * w, swt += w * t;
    ClassFit f;
    f.points = int(p.size());
    const double den = n * sww - sw * sw;
    double slope = den > 0 ? (n * swt - sw * st) / den : 0, icpt = den > 0 ? (st - slope * sw) / n : 0;
    if (den <= 0 || slope <= 0 || icpt < 0) slope = swt / sww, icpt = 0;
    f.rate = 1.0 / slope;
    f.overhead_s = icpt;
    fits[cls] = f;
  }
}

std::string OpProfile::to_json() const {
  nlohmann::json j;
  j["format"] = kFormat;
  j["device"] = device;
  j["tripod_version"] = tripod_version;
  j["measured_seconds"] = measured;
  nlohmann::json f = nlohmann::json::object();
  for (auto [cls, name] : kClasses)
    if (auto it = fits.find(cls); it != fits.end())
      f[name] = {{"rate_per_s", it->second.rate}, {"overhead_s", it->second.overhead_s}, {"points", it->second.points}};
  j["fits"] = f;
  return j.dump(1);
}

OpProfile OpProfile::from_json(const std::string& text, const std::string& source) {
  OpProfile p;
  try {
    const auto j = nlohmann::json::parse(text);
    TRIPOD_CHECK_HINT(j.value("format", 0) == kFormat, "run `tripod plan --calibrate` again",
                      "{}: op-time format {}, this tripod reads {}", source, j.value("format", 0), kFormat);
    p.device = j.at("device").get<std::string>();
    p.tripod_version = j.at("tripod_version").get<std::string>();
    p.measured = j.at("measured_seconds").get<std::map<std::string, double>>();
    for (auto [cls, name] : kClasses)
      if (j.contains("fits") && j["fits"].contains(name)) {
        const auto& f = j["fits"][name];
        p.fits[cls] = ClassFit{f.at("rate_per_s").get<double>(), f.at("overhead_s").get<double>(),
                               f.value("points", 0)};
      }
  } catch (const nlohmann::json::exception& e) {
    TRIPOD_CHECK_HINT(false, "delete it or run `tripod plan --calibrate` again", "{} is not a tripod op-time file: {}",
                      source, e.what());
  }
  p.origin = source;
  return p;
}

std::string tripod_version() { return TRIPOD_VERSION_STRING; }

std::string calibration_cache_path(const std::string& device) {
  std::string dir;
  if (const char* d = std::getenv("TRIPOD_CACHE_DIR"); d && *d)
    dir = d;
  else if (const char* h = std::getenv("HOME"); h && *h)
    dir = std::string(h) + "/.cache/tripod";
  else
    dir = ".cache/tripod";
  std::string slug;
  for (char c : device) slug += std::isalnum(static_cast<unsigned char>(c)) ? char(std::tolower(c)) : '_';
  return dir + "/plan/" + slug + ".json";
}

std::optional<OpProfile> load_calibration(const std::string& path, const std::string& device, std::string* why) {
  std::ifstream in(path);
  if (!in) {
    if (why) *why = fmt::format("no calibration for {} ({})", device, path);
    return std::nullopt;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  OpProfile p;
  try {
    p = OpProfile::from_json(ss.str(), path);
  } catch (const Error& e) {
    if (why) *why = fmt::format("ignored {}: {}", path, e.what());
    return std::nullopt;
  }
  if (p.device != device || p.tripod_version != tripod_version()) {
    if (why)
      *why = fmt::format("ignored {}: measured on {} by tripod {}, this is {} with tripod {} (run --calibrate again)",
                         path, p.device, p.tripod_version, device, tripod_version());
    return std::nullopt;
  }
  p.origin = fmt::format("measured on this machine ({}, {} ops; {})", device, p.measured.size(), path);
  return p;
}

void save_calibration(const std::string& path, const OpProfile& p) {
  const fs::path target(path);
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  TRIPOD_CHECK(!ec, "cannot create {}: {}", target.parent_path().string(), ec.message());
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    TRIPOD_CHECK(out.good(), "cannot write {}", tmp);
    out << p.to_json() << "\n";
    out.flush();
    TRIPOD_CHECK(out.good(), "cannot write {} (disk full?)", tmp);
  }
  fs::rename(tmp, target, ec);
  if (ec) fs::remove(tmp);
  TRIPOD_CHECK(!ec, "cannot rename {} to {}: {}", tmp, path, ec.message());
}

}  // namespace tripod::plan
