// backend_ops cases: the FP8 ops (fp8_quantize, fp8_cast_transpose,
// fp8_dequantize, fp8_matmul, fp8_update_scale, and block scaling's
// fp8_block_cast, fp8_block_cast_tiles, fp8_block_matmul). The casts are exact cases: every output
// (FP8 codes, amax, dequantized values) must equal the CPU reference bit for
// bit, including saturation, NaN, signed zeros, subnormals and values below
// half the smallest subnormal, which the `_special` cases write at the
// front of the input. fp8_matmul is gated by NMSE against the f64 product
// of the exactly decoded operands (fp8_matmul_gate below says why).
// Shapes: one the CUDA fast paths take (widths multiples of 16, 16-byte
// rows) and one they do not (odd widths, rows not a multiple of the tiles).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cases.h"

namespace tripod::testing {

using backend::Backend;

namespace {

// Values at the edges of both formats' rounding rules (with scale 1):
// ties at the top (464: ties to 448 in E4M3; 61440: to 57344 in E5M2, whose
// next step would pass max), overflow and inf (saturate), NaN of either
// sign (0x7f), signed zeros, subnormal ties (3 * 2^-10 = 1.5 quanta of
// E4M3's 2^-9 -> 2 quanta), half the smallest subnormal (-> zero),
// mantissa ties (1.0625 -> 1, 1.1875 -> 1.25 in E4M3), and an f32
// subnormal. Each format meets the other's edges too.
std::vector<double> special_values() {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  return {nan, -nan, inf, -inf, 0.0, -0.0, 448, -448, 464, 465, 480, -1e6, 57344, 61440, 61439, 65536,
          std::ldexp(1, -9), std::ldexp(1, -10), -std::ldexp(1, -10), std::ldexp(1.5, -10), std::ldexp(3, -10),
          std::ldexp(5, -10), std::ldexp(1, -16), std::ldexp(1, -17), std::ldexp(1.5, -17), std::ldexp(3, -17),
          1e-30, -1e-30, 1.0625, 1.1875, 17, 18, -19, 0.1, 1e-45, std::ldexp(1, -14), std::ldexp(1, -6)};
}

// prepare(): the scale (the f64 reference holds an f32 value), and the
// special values at the front of `in` when asked (scale 1 then, so the
// values meet the rules as written).
OpFn set_scale(size_t in, size_t scale, float value, bool specials) {
  return [=](Backend&, Args& t) {
    t[scale].data<double>()[0] = specials ? 1.0 : static_cast<double>(value);
    if (!specials) {
      t[in].data<double>()[0] = std::numeric_limits<double>::quiet_NaN();  // skipped by amax
      return;
    }
    const std::vector<double> v = special_values();
    double* x = t[in].data<double>();
    for (size_t i = 0; i < v.size() && static_cast<int64_t>(i) < t[in].numel(); ++i) x[i] = v[i];
  };
}

// fp8_matmul's NMSE gate. The products of two FP8 values are exact in f32
// (at most 4 + 4 significant bits) and the reference sums them exactly in
// f64, so the error is the GEMM's accumulation plus the output rounding.
// Hopper's FP8 tensor cores add within one MMA keeping about 14 bits
// (DeepSeek-V3 report, sec. 3.3.2), and cuBLASLt (fast accumulation off)
// promotes each MMA's sum into f32: a relative error of ~2^-14 ~ 6e-5 per
// partial sum at worst, an NMSE of a few 1e-9, so f32 outputs get 1e-7
// (an f32 GEMM gets 1e-9). bf16 and f16 outputs are dominated by their own
// rounding (2^-9, 2^-11 relative) and keep the harness's gates.
double fp8_matmul_gate(DType out) { return out == DType::F32 ? 1e-7 : tolerance(out); }
// With fast accumulation (Transformer Engine's forward GEMM) the partial sums
// stay at ~14 bits across the whole K loop, so f32 outputs are gated as
// bf16 ones (the model asks for it only with bf16/f16 outputs).
double fp8_matmul_fast_gate(DType out) { return tolerance(out == DType::F32 ? DType::BF16 : out); }

Kind kind_of(DType fp8) { return fp8 == DType::E4M3 ? Kind::E4M3 : Kind::E5M2; }

// prepare() of the block casts: amaxes spread over 2^-24..2^24, each value
// scaled by 2^(min(e(row), e(column)) + e(tile)), so the 1x128 blocks of a
// row reach e(row), the 128-row blocks of a column e(column), and tiles
// differ by e(tile) (a scale read from the wrong block shows); and rows
// (columns) that meet the scale's edge cases: all zeros; NaN (skipped by
// the amax); +-inf (amax inf: scale 1, saturated codes); 3e38 (a scale of
// 2^-120, the rest of the block underflowing); f32 subnormals only (the
// quotient overflows: 2^127); amax 3.5 in every block (E4M3 scale 448/3.5
// = 128 exactly); amax 7 (448/7 = 64, 57344/7 = 8192: exact powers) and
// 4 ulps above it (the power below); the last column zero (its column
// blocks: scale 1, or inf's). f16 and bf16 inputs round these as they can
// (3e38 -> inf in f16): both backends see the rounded values.
OpFn block_values(size_t in, int64_t R, int64_t C) {
  return [=](Backend&, Args& t) {
    double* x = t[in].data<double>();
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t row_e = r * 7 % 41 - 20, col_e = c * 5 % 41 - 20, tile_e = (r / 128 * 3 + c / 128 * 5) % 9 - 4;
        x[r * C + c] *= std::ldexp(1.0, static_cast<int>(std::min(row_e, col_e) + tile_e));
      }
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    auto row = [&](int64_t r) { return x + r * C; };
    if (R > 0) std::fill(row(0), row(0) + C, 0.0);
    if (R > 1) row(1)[0] = nan, row(1)[C / 2] = -nan, row(1)[C - 1] = -nan;
    if (R > 2 && C > 1) row(2)[1] = inf, row(2)[C - 1] = -inf;
    if (R > 3 && C > 2) row(3)[2] = 3e38, row(3)[C - 2] = -1e38;
    if (R > 4)
      for (int64_t c = 0; c < C; ++c) row(4)[c] = (c % 3 - 1) * 1e-42 * (1 + c % 5);
    if (R > 5)
      for (int64_t c = 0; c < C; ++c) row(5)[c] = c % backend::kFp8Block ? 3.5 * std::tanh(row(5)[c]) : -3.5;
    if (R > 6)
      for (int64_t c = 0; c < C; ++c) row(6)[c] = std::tanh(row(6)[c]);
    if (R > 6) row(6)[0] = 7.0;
    if (R > 6 && C > 128) row(6)[128] = -(7.0 + std::ldexp(4.0, -21));  // 4 f32 ulps
    for (int64_t r = 7; r < R; ++r) row(r)[C - 1] = 0.0;
  };
}

// Powers of two 2^-8..2^-4 as a GEMM's block scales (so a scale read from
// the wrong block changes the product by up to 16x; small enough that
// f16 outputs stay finite).
void power_scales(Tensor& s) {
  double* p = s.data<double>();
  for (int64_t i = 0; i < s.numel(); ++i) p[i] = std::ldexp(1.0, static_cast<int>((i * 3) % 5) - 8);
}

}  // namespace

void add_fp8_cases(std::vector<OpCase>& v) {
  struct Fmt { const char* tag; DType dt; float scale; };
  struct Sh { const char* tag; int64_t r, c; bool specials; };
  for (Fmt f : {Fmt{"_e4m3", DType::E4M3, 300.7f}, Fmt{"_e5m2", DType::E5M2, 20011.3f}}) {
    const Kind k = kind_of(f.dt);
    for (Sh s : {Sh{"", 64, 96, false}, Sh{"_odd", 67, 100, false}, Sh{"_special", 8, 16, true}}) {
      const int64_t R = s.r, C = s.c;
      const std::string tag = std::string(f.tag) + s.tag;
      OpCase q{"fp8_quantize" + tag,
               {out("out", {R, C}, k), acc("amax", {1}, Kind::F32, true), in("in", {R, C}),
                positive("scale", {1}, Kind::F32)},
               [](Backend& be, Args& t) { be.fp8_quantize(t[0], t[1], t[2], t[3]); },
               set_scale(2, 3, f.scale, s.specials)};
      q.exact = true;
      v.push_back(q);
    }
    // Cast + transpose: tiles of the CUDA kernels whole, cut, and one row;
    // `_tiles` runs the 128 x 128 kernel over two row and three column tiles,
    // the last ones cut.
    for (Sh s : {Sh{"", 64, 96, false}, Sh{"_odd", 67, 100, false}, Sh{"_tall", 130, 33, false},
                 Sh{"_row", 1, 48, false}, Sh{"_tiles", 136, 264, false}, Sh{"_special", 8, 16, true}}) {
      const int64_t R = s.r, C = s.c;
      OpCase ct{std::string("fp8_cast_transpose") + f.tag + s.tag,
                {out("out", {R, C}, k), out("out_t", {C, R}, k), acc("amax", {1}, Kind::F32, true),
                 in("in", {R, C}), positive("scale", {1}, Kind::F32)},
                [](Backend& be, Args& t) { be.fp8_cast_transpose(t[0], t[1], t[2], t[3], t[4]); },
                set_scale(3, 4, f.scale, s.specials)};
      ct.exact = true;
      v.push_back(ct);
    }
    // Dequantize: the codes come from N(0, 1) * (max / 4) rounded to the
    // format (saturated tails, subnormals near zero); NaN and inf codes
    // (E5M2) are written in front by prepare.
    for (Sh s : {Sh{"", 64, 96, false}, Sh{"_odd", 67, 100, false}}) {
      const int64_t R = s.r, C = s.c;
      const DType dt = f.dt;
      OpCase dq{std::string("fp8_dequantize") + f.tag + s.tag,
                {out("out", {R, C}), in("in", {R, C}, k, fp8_max(f.dt) / 4), positive("scale_inv", {1}, Kind::F32)},
                [](Backend& be, Args& t) { be.fp8_dequantize(t[0], t[1], t[2]); },
                [dt](Backend&, Args& t) {
                  uint8_t* c = static_cast<uint8_t*>(t[1].raw());
                  const uint8_t codes[] = {0x7f, 0x80, 0x00, 0x01, 0x81, 0x7e, 0xfe, 0x7c, 0xfc, 0x7b, 0x04, 0x08};
                  for (size_t i = 0; i < sizeof(codes); ++i) c[i] = codes[i];
                  t[2].data<double>()[0] = 1.0 / (dt == DType::E4M3 ? 300.7f : 20011.3f);
                }};
      dq.exact = true;
      v.push_back(dq);
    }
  }

  // ---- fp8_matmul: E4M3 x E4M3 (forward), E5M2 x E4M3 (hybrid dgrad/wgrad),
  // with and without bias, and the wgrad form (out +=) ----
  struct Mm { const char* tag; int64_t n, k, oc; DType a, b; bool bias, accumulate, fast = false; };
  for (Mm m : {Mm{"", 64, 128, 48, DType::E4M3, DType::E4M3, false, false},
               Mm{"_bias", 64, 128, 48, DType::E4M3, DType::E4M3, true, false},
               Mm{"_e5m2_a", 48, 64, 80, DType::E5M2, DType::E4M3, false, false},
               Mm{"_e5m2_b_accumulate", 32, 96, 64, DType::E4M3, DType::E5M2, false, true},
               Mm{"_odd", 37, 50, 29, DType::E4M3, DType::E4M3, true, false},
               Mm{"_odd_accumulate", 37, 50, 29, DType::E5M2, DType::E4M3, false, true},
               Mm{"_fast_accum_bias", 64, 1024, 96, DType::E4M3, DType::E4M3, true, false, true}}) {
    const int64_t N = m.n, K = m.k, OC = m.oc;
    std::vector<ArgSpec> args{m.accumulate ? acc("out", {N, OC}) : out("out", {N, OC}),
                              in("a", {N, K}, kind_of(m.a), fp8_max(m.a) / 8), positive("a_scale_inv", {1}, Kind::F32, 0.01),
                              in("b", {OC, K}, kind_of(m.b), fp8_max(m.b) / 8), positive("b_scale_inv", {1}, Kind::F32, 0.01)};
    if (m.bias) args.push_back(in("bias", {OC}));
    const bool bias = m.bias, accumulate = m.accumulate, fast = m.fast;
    OpCase c{std::string("fp8_matmul") + m.tag, args, [bias, accumulate, fast](Backend& be, Args& t) {
               be.fp8_matmul(t[0], t[1], t[2], t[3], t[4], bias ? &t[5] : nullptr, accumulate, fast);
             }};
    c.gate = fast ? fp8_matmul_fast_gate : fp8_matmul_gate;
    v.push_back(c);
  }

  // ---- fp8_update_scale: M tensors' scales from their amaxes, with a
  // rolling history (max or most recent) and without; exact (f32 steps);
  // a zero and an infinite amax in front: scale 1 without a history, the
  // old scale with one ----
  struct Up { const char* tag; int64_t m, h; bool history, use_max; int margin; float max; };
  for (Up u : {Up{"", 5, 0, false, false, 0, 448.f}, Up{"_history_max", 7, 4, true, true, 1, 57344.f},
               Up{"_history_most_recent", 3, 3, true, false, 2, 448.f}, Up{"_many", 300, 2, true, true, 0, 448.f}}) {
    // With a history the old scale is read (kept where the amax is 0 or inf).
    std::vector<ArgSpec> args{u.history ? acc("scale", {u.m}, Kind::F32, true) : out("scale", {u.m}, Kind::F32),
                              out("scale_inv", {u.m}, Kind::F32), positive("amax", {u.m}, Kind::F32, 3.0)};
    if (u.history) args.push_back(acc("amax_history", {u.m, u.h}, Kind::F32, true));
    OpCase c{std::string("fp8_update_scale") + u.tag, args,
             [u](Backend& be, Args& t) {
               be.fp8_update_scale(t[0], t[1], u.history ? &t[3] : nullptr, t[2], u.max, u.margin, u.use_max);
             },
             [u](Backend&, Args& t) {
               t[2].data<double>()[0] = 0.0;
               if (u.m > 2) t[2].data<double>()[2] = std::numeric_limits<double>::infinity();
             }};
    c.exact = true;
    v.push_back(c);
  }

  // ---- block scaling: the casts bit for bit, with and without the
  // transpose, on shapes the CUDA fast kernel takes (R, C multiples of 8:
  // whole tiles, and cut ones) and ones it leaves to the element kernel
  // (200 x 300; 9 rows); values from block_values ----
  using backend::fp8_blocks;
  using backend::fp8_tile_ld;
  struct Bs { const char* tag; int64_t r, c; };
  const Bs block_shapes[] = {{"", 256, 384}, {"_cut", 200, 304}, {"_odd", 200, 300}, {"_small", 9, 20}};
  for (Fmt f : {Fmt{"_e4m3", DType::E4M3, 0.f}, Fmt{"_e5m2", DType::E5M2, 0.f}}) {
    const Kind k = kind_of(f.dt);
    for (Bs s : block_shapes)
      for (bool tr : {false, true}) {
        const int64_t R = s.r, C = s.c;
        std::vector<ArgSpec> args{out("out", {R, C}, k), out("scale_inv", {fp8_blocks(C) * R}, Kind::F32)};
        if (tr) {
          args.push_back(out("out_t", {C, R}, k));
          args.push_back(out("scale_inv_t", {fp8_blocks(R) * C}, Kind::F32));
        }
        const size_t x = args.size();
        args.push_back(in("in", {R, C}));
        OpCase c{std::string("fp8_block_cast") + (tr ? "_transpose" : "") + f.tag + s.tag, args,
                 [tr, x](Backend& be, Args& t) {
                   be.fp8_block_cast(t[0], t[1], tr ? &t[2] : nullptr, tr ? &t[3] : nullptr, t[x]);
                 },
                 block_values(x, R, C)};
        c.exact = true;
        v.push_back(c);
      }
    // Tiles: the padded scale rows (ld 4 for 3 column tiles, 8 for 6), written as 1.
    for (Bs s : {block_shapes[0], block_shapes[1], block_shapes[2], Bs{"_wide", 136, 648}}) {
      const int64_t R = s.r, C = s.c;
      OpCase c{std::string("fp8_block_cast_tiles") + f.tag + s.tag,
               {out("out", {R, C}, k), out("out_t", {C, R}, k),
                out("scale_inv", {fp8_blocks(R) * fp8_tile_ld(C)}, Kind::F32),
                out("scale_inv_t", {fp8_blocks(C) * fp8_tile_ld(R)}, Kind::F32), in("in", {R, C})},
               [](Backend& be, Args& t) { be.fp8_block_cast_tiles(t[0], t[1], t[2], t[3], t[4]); },
               block_values(4, R, C)};
      c.exact = true;
      v.push_back(c);
    }
  }

  // ---- fp8_block_matmul: the forward / dgrad form (a 1x128 x b 128x128
  // tiles, with and without bias, K and OC cut), the wgrad form (1x128 x
  // 1x128, out += into an f32 main grad or the compute dtype), E5M2 x E4M3,
  // and shapes cuBLASLt does not take (N not a multiple of 4; K, OC not
  // multiples of 16: the fallback kernel). Gated as fp8_matmul: both sum
  // f32 partials of exact code products (per 128-wide K block, then times
  // the block's scales, exact powers of two here) ----
  struct Bm { const char* tag; int64_t n, k, oc; DType a, b; bool tiles, bias, accumulate, f32_out; };
  for (Bm m : {Bm{"_fwd", 96, 384, 256, DType::E4M3, DType::E4M3, true, false, false, false},
               Bm{"_fwd_bias", 64, 256, 192, DType::E4M3, DType::E4M3, true, true, false, false},
               Bm{"_fwd_cut_bias", 48, 208, 144, DType::E4M3, DType::E4M3, true, true, false, false},
               Bm{"_dgrad_e5m2", 64, 384, 160, DType::E5M2, DType::E4M3, true, false, false, false},
               Bm{"_wgrad_f32_accumulate", 96, 256, 64, DType::E5M2, DType::E4M3, false, false, true, true},
               Bm{"_wgrad_accumulate", 64, 400, 48, DType::E4M3, DType::E4M3, false, false, true, false},
               Bm{"_n50", 50, 256, 64, DType::E4M3, DType::E4M3, true, true, false, false},
               Bm{"_odd_bias", 37, 200, 29, DType::E4M3, DType::E4M3, true, true, false, false},
               Bm{"_odd_f32_accumulate", 37, 200, 29, DType::E5M2, DType::E4M3, false, false, true, true}}) {
    const int64_t N = m.n, K = m.k, OC = m.oc;
    const Kind ok = m.f32_out ? Kind::F32 : Kind::Act;
    const int64_t nb = m.tiles ? fp8_blocks(OC) * fp8_tile_ld(K) : fp8_blocks(K) * OC;
    std::vector<ArgSpec> args{m.accumulate ? acc("out", {N, OC}, ok) : out("out", {N, OC}, ok),
                              in("a", {N, K}, kind_of(m.a), fp8_max(m.a) / 8),
                              positive("a_scale_inv", {fp8_blocks(K) * N}, Kind::F32),
                              in("b", {OC, K}, kind_of(m.b), fp8_max(m.b) / 8),
                              positive("b_scale_inv", {nb}, Kind::F32)};
    if (m.bias) args.push_back(in("bias", {OC}));
    const bool tiles = m.tiles, bias = m.bias, accumulate = m.accumulate, f32 = m.f32_out;
    OpCase c{std::string("fp8_block_matmul") + m.tag, args,
             [tiles, bias, accumulate](Backend& be, Args& t) {
               be.fp8_block_matmul(t[0], t[1], t[2], t[3], t[4], tiles, bias ? &t[5] : nullptr, accumulate);
             },
             [](Backend&, Args& t) {
               power_scales(t[2]);
               power_scales(t[4]);
             }};
    c.gate = [f32](DType act) { return fp8_matmul_gate(f32 ? DType::F32 : act); };
    v.push_back(c);
  }
}

}  // namespace tripod::testing
