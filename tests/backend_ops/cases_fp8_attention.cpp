// backend_ops cases: FP8 attention (attention_fp8_forward / backward, NOTE
// [FP8 attention] in backend/cpu/fp8_attention.cpp), causal, multi-head
// and grouped-query, head size 128 (what the CUDA backend serves, through
// cuDNN, on Hopper), T a multiple of 64, under both formats (hybrid: dout
// and dqkv E5M2; e4m3). The scales are those a current-scaling recipe would
// set: qkv holds N(0, 1) values cast with scale 112 (448 / a 4-sigma amax);
// s_scale 448 (P <= 1); o_scale, dp_scale and dqkv_scale are fp8_max / the
// true amax of O, dS and dQ/dK/dV, found by running the reference first.
// The amaxes start at 0, or, in the `_amax_start` cases, one below and one
// above the op's maximum (they accumulate). No activation is involved, so
// the cases run once (f32_only).
//
// Tolerances (fp8_attention_bound). The reference rounds P and dS to FP8
// from double; cuDNN forms them in f32 inside an online softmax and may
// round P before normalising it (exp(S - running max), divided by the row
// sum after P8 V), so a P8 or dS8 code can land on a neighbouring code.
// Each E4M3 rounding of P is within 2^-4 of P, so two such roundings move
// O by at most 2^-3 sum_j P_j |V_j|, about one step of out at its amax, and
// the output rounding adds one step. So out and dqkv are compared as codes
// (dequantizing scales both sides alike) within kFp8Steps = 2 steps of
// their format at the reference's amax: evaluating these cases in f32 moves
// no code by more than 0.06 of that step, rounding P before normalising
// moves half of out's codes, by at most 1 step; a descale wrong by 2x
// moves an element of half the amax by half the amax (3.5 steps of E5M2 at
// 57344, 7 of E4M3 at 448). lse: 1e-3 relative. Hopper's FP8 MMA does not
// accumulate in full f32 (about 14 bits kept between promotions), so cuDNN's
// S = Q8 K8^T over HS = 128 products moves lse by ~1e-4 relative (measured
// 5e-4 at lse ~3 on an H100 with cuDNN 9.19); a wrong descale moves it by
// far more.
// o_amax is max |O| before its rounding, so it moves with P8: 2^-3
// relative (rounding P before normalising moved it by 4%). The other
// amaxes do not depend on how the forward rounds P (s_amax is max P, the
// backward recomputes P from lse): 1% relative. An amax overwritten instead
// of accumulated is off by 2x in the `_amax_start` cases. (The reference
// itself is held element by element to the f32 attention ops by
// test_fp8_attention_ref.cpp.)
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "cases.h"

namespace tripod::testing {

using backend::Backend;
using backend::Fp8AttentionMeta;

namespace {

constexpr double kFp8Steps = 2;
constexpr double kLseRel = 1e-3;
constexpr double kOAmaxRel = 0.125;
constexpr double kAmaxRel = 0.01;

// One step of an FP8 format at magnitude x (the subnormal step below the
// normal range).
double fp8_step(double x, DType fp8) {
  const int mbits = fp8 == DType::E4M3 ? 3 : 2, min_exp = fp8 == DType::E4M3 ? -6 : -14;
  const int e = x > 0 && std::isfinite(x) ? std::max(std::ilogb(x), min_exp) : min_exp;
  return std::ldexp(1.0, e - mbits);
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::fmax(m, std::fabs(x));
  return m;
}

enum class Checked { Fp8, Lse, OAmax, Amax };

// The bound of each checked argument (its kind by argument index).
std::function<double(size_t, const std::vector<double>&)> fp8_attention_bound(std::vector<Checked> kinds, DType fp8) {
  return [kinds, fp8](size_t i, const std::vector<double>& want) {
    const double a = max_abs(want);
    switch (kinds.at(i)) {
      case Checked::Fp8: return kFp8Steps * fp8_step(a, fp8);
      case Checked::Lse: return kLseRel * std::max(1.0, a);
      case Checked::OAmax: return kOAmaxRel * a;
      case Checked::Amax: return kAmaxRel * a;
    }
    return 0.0;
  };
}

// Reference-side helpers (f64 statistics tensors holding f32 values).
double get(const Tensor& t) { return t.data<double>()[0]; }
void set(Tensor& t, double v) { t.data<double>()[0] = static_cast<float>(v); }
Tensor scalar(Backend& be, double v) {
  Tensor t = be.empty({1}, DType::F64);
  set(t, v);
  return t;
}
// fp8_max / amax in f32, as fp8_update_scale computes it.
float scale_for(DType fp8, double amax) { return fp8_max(fp8) / static_cast<float>(amax); }

constexpr double kQkvScale = 112;       // 448 / 4 sigma
constexpr double kDoutSigma = 1e-3;     // dout values: N(0, 1e-3)

// The forward's scales into qkv_si, s, s_si; out and lse from the reference
// run with o_scale from the true amax of O. Returns that o_scale.
float reference_forward(Backend& be, Tensor& out, Tensor& lse, const Tensor& qkv, Tensor& qkv_si, Tensor& s,
                        Tensor& s_si, int nh, int g) {
  set(qkv_si, 1.0f / static_cast<float>(kQkvScale));
  set(s, 448);
  set(s_si, 1.0f / 448.0f);
  Fp8AttentionMeta m;
  m.qkv_scale_inv = qkv_si;
  m.s_scale = s;
  m.s_scale_inv = s_si;
  m.s_amax = scalar(be, 0);
  m.o_scale = scalar(be, 1);
  m.o_amax = scalar(be, 0);
  be.attention_fp8_forward(out, lse, qkv, m, nh, g);
  const float o_scale = scale_for(DType::E4M3, get(m.o_amax));
  set(m.o_scale, o_scale);
  be.attention_fp8_forward(out, lse, qkv, m, nh, g);
  return o_scale;
}

}  // namespace

void add_fp8_attention_cases(std::vector<OpCase>& v) {
  // amax_start: the amaxes' initial values as fractions of the op's own
  // maximum (0: start from zero).
  struct Sh { const char* tag; int64_t b, t; int nh, g; double start_lo, start_hi; };
  const Sh shapes[] = {{"_mha", 2, 64, 4, 4, 0, 0}, {"_gqa", 1, 128, 4, 2, 0, 0},
                       {"_gqa_amax_start", 2, 64, 4, 2, 0.5, 2.0}};

  for (const Sh& s : shapes) {
    const int64_t B = s.b, T = s.t, HS = 128, C = s.nh * HS, W = (s.nh + 2 * s.g) * HS;
    const int nh = s.nh, g = s.g;
    const double lo = s.start_lo, hi = s.start_hi;
    // 0 out, 1 lse, 2 s_amax, 3 o_amax, 4 qkv, 5 qkv_scale_inv, 6 s_scale, 7 s_scale_inv, 8 o_scale
    OpCase c{std::string("attention_fp8_forward") + s.tag,
             {out("out", {B, T, C}, Kind::E4M3), out("lse", {B, nh, T}, Kind::F32),
              acc("s_amax", {1}, Kind::F32, true), acc("o_amax", {1}, Kind::F32, true),
              in("qkv", {B, T, W}, Kind::E4M3, kQkvScale), positive("qkv_scale_inv", {1}, Kind::F32),
              positive("s_scale", {1}, Kind::F32), positive("s_scale_inv", {1}, Kind::F32),
              positive("o_scale", {1}, Kind::F32)},
             [nh, g](Backend& be, Args& t) {
               Fp8AttentionMeta m;
               m.s_amax = t[2];
               m.o_amax = t[3];
               m.qkv_scale_inv = t[5];
               m.s_scale = t[6];
               m.s_scale_inv = t[7];
               m.o_scale = t[8];
               be.attention_fp8_forward(t[0], t[1], t[4], m, nh, g);
             },
             [nh, g, lo, hi](Backend& be, Args& t) {
               set(t[8], reference_forward(be, t[0], t[1], t[4], t[5], t[6], t[7], nh, g));
               // max P is 1 (row 0 attends to itself only); O's amax is 448 / o_scale.
               set(t[2], lo);
               set(t[3], hi * 448.0 / get(t[8]));
             }};
    c.f32_only = true;
    c.bound = fp8_attention_bound({Checked::Fp8, Checked::Lse, Checked::Amax, Checked::OAmax}, DType::E4M3);
    v.push_back(c);
  }

  struct Bw { const char* tag; DType fmt; Sh sh; };
  const Bw backward[] = {{"_hybrid_mha", DType::E5M2, shapes[0]}, {"_e4m3_gqa", DType::E4M3, shapes[1]},
                         {"_hybrid_gqa_amax_start", DType::E5M2, shapes[2]}};
  for (const Bw& bw : backward) {
    const Sh& s = bw.sh;
    const int64_t B = s.b, T = s.t, HS = 128, C = s.nh * HS, W = (s.nh + 2 * s.g) * HS;
    const int nh = s.nh, g = s.g;
    const double lo = s.start_lo, hi = s.start_hi;
    const DType fmt = bw.fmt;
    const Kind k = fmt == DType::E4M3 ? Kind::E4M3 : Kind::E5M2;
    // 0 dqkv, 1 dp_amax, 2 dqkv_amax, 3 dout, 4 qkv, 5 out, 6 lse, 7 qkv_scale_inv, 8 o_scale_inv,
    // 9 dout_scale_inv, 10 s_scale, 11 s_scale_inv, 12 dp_scale, 13 dp_scale_inv, 14 dqkv_scale
    auto meta = [](Args& t) {
      Fp8AttentionMeta m;
      m.dp_amax = t[1];
      m.dqkv_amax = t[2];
      m.qkv_scale_inv = t[7];
      m.o_scale_inv = t[8];
      m.dout_scale_inv = t[9];
      m.s_scale = t[10];
      m.s_scale_inv = t[11];
      m.dp_scale = t[12];
      m.dp_scale_inv = t[13];
      m.dqkv_scale = t[14];
      return m;
    };
    OpCase c{std::string("attention_fp8_backward") + bw.tag,
             {out("dqkv", {B, T, W}, k), acc("dp_amax", {1}, Kind::F32, true),
              acc("dqkv_amax", {1}, Kind::F32, true), in("dout", {B, T, C}, k, fp8_max(fmt) / 4),
              in("qkv", {B, T, W}, Kind::E4M3, kQkvScale), in("out", {B, T, C}, Kind::E4M3),
              in("lse", {B, nh, T}, Kind::F32), positive("qkv_scale_inv", {1}, Kind::F32),
              positive("o_scale_inv", {1}, Kind::F32), positive("dout_scale_inv", {1}, Kind::F32),
              positive("s_scale", {1}, Kind::F32), positive("s_scale_inv", {1}, Kind::F32),
              positive("dp_scale", {1}, Kind::F32), positive("dp_scale_inv", {1}, Kind::F32),
              positive("dqkv_scale", {1}, Kind::F32)},
             [nh, g, meta](Backend& be, Args& t) {
               be.attention_fp8_backward(t[0], t[3], t[4], t[5], t[6], meta(t), nh, g);
             },
             [nh, g, lo, hi, fmt, meta](Backend& be, Args& t) {
               const float o_scale = reference_forward(be, t[5], t[6], t[4], t[7], t[10], t[11], nh, g);
               set(t[8], 1.0f / o_scale);
               // dout codes of N(0, 1) * fp8_max / 4 hold values of N(0, kDoutSigma).
               set(t[9], static_cast<float>(4 * kDoutSigma) / fp8_max(fmt));
               // dp_scale from the true max |dS|, then dqkv_scale from the max
               // of dQ, dK, dV computed with that dS8.
               Fp8AttentionMeta m = meta(t);
               m.dp_amax = scalar(be, 0);
               m.dqkv_amax = scalar(be, 0);
               set(t[12], 1);
               set(t[13], 1);
               set(t[14], 1);
               be.attention_fp8_backward(t[0], t[3], t[4], t[5], t[6], m, nh, g);
               const float dp_scale = scale_for(fmt, get(m.dp_amax));
               set(t[12], dp_scale);
               set(t[13], 1.0f / dp_scale);
               set(m.dqkv_amax, 0);
               be.attention_fp8_backward(t[0], t[3], t[4], t[5], t[6], m, nh, g);
               set(t[14], scale_for(fmt, get(m.dqkv_amax)));
               set(t[1], hi * get(m.dp_amax));
               set(t[2], lo * get(m.dqkv_amax));
             }};
    c.f32_only = true;
    c.bound = fp8_attention_bound({Checked::Fp8, Checked::Amax, Checked::Amax}, fmt);
    v.push_back(c);
  }
}

}  // namespace tripod::testing
