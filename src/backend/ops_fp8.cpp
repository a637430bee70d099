// The FP8 ops of backend/ops.h (Transformer Engine's vocabulary: quantize,
// cast-transpose, dequantize, the FP8 GEMM): their validators, shared by
// every backend, then the backend's <op>_impl. The conversion rules are
// tensor/dtype.h's (f32_to_fp8, fp8_to_f32).
#include <cmath>

#include "backend/checks.h"
#include "backend/ops.h"

namespace tripod::backend {
namespace {

using namespace checks;

void fp8(const Checks& k, const Tensor& t, const char* name) {
  k.on_device(t, name);
  k.that(is_fp8(t.dtype()), fmt::format("{} must have an FP8 dtype (e4m3 or e5m2), got {}", name, t.str()));
}

// A per-tensor scalar (scale, scale_inv, amax): one statistics element.
void scalar(const Checks& k, const Tensor& t, const char* name, DType act) {
  k.stat(t, name, act, 1, "one per tensor");
}

// Shared by fp8_quantize and fp8_cast_transpose.
DType check_quantize(const Checks& k, const Tensor& out, const Tensor& amax, const Tensor& in,
                     const Tensor& scale) {
  const DType dt = k.act(in, "in");
  fp8(k, out, "out");
  k.numel(out, "out", in.numel(), "as many as in");
  scalar(k, amax, "amax", dt);
  scalar(k, scale, "scale", dt);
  return dt;
}

}  // namespace

void Backend::fp8_quantize(Tensor& out, Tensor& amax, const Tensor& in, const Tensor& scale) {
  check_quantize(Checks(*this, "fp8_quantize"), out, amax, in, scale);
  fp8_cast_transpose_impl(out, nullptr, amax, in, scale);
}

void Backend::fp8_cast_transpose(Tensor& out, Tensor& out_t, Tensor& amax, const Tensor& in,
                                 const Tensor& scale) {
  Checks k(*this, "fp8_cast_transpose");
  check_quantize(k, out, amax, in, scale);
  k.that(in.dim() >= 2, fmt::format("in {} must be (R, C): rows of C", in.str()));
  fp8(k, out_t, "out_t");
  k.that(out_t.dtype() == out.dtype(),
         fmt::format("out_t {} and out {} must have one FP8 dtype", out_t.str(), out.str()));
  k.dim(out_t, "out_t", 2, "(C, R): the transpose of in");
  k.that(out_t.size(0) == in.size(-1) && out_t.size(1) == rows_of(in),
         fmt::format("out_t {} must be (C, R) = ({}, {}), the transpose of in {}", out_t.str(), in.size(-1),
                     rows_of(in), in.str()));
  k.that(!overlaps(out, out_t), "out and out_t must not overlap");
  fp8_cast_transpose_impl(out, &out_t, amax, in, scale);
}

namespace {

// The SwiGLU casts: inp (R, 2F) of an activation dtype, out (R, W) and
// out_t (W, R) of one FP8 dtype, W = F forward and 2F backward. Returns
// inp's dtype; the callers check their scaling statistics.
DType check_swiglu_cast(const Checks& k, const Tensor& out, const Tensor& out_t, const Tensor& inp, bool backward) {
  const DType dt = k.act(inp, "inp");
  k.dim(inp, "inp", 2, "(R, 2F): [gate | up]");
  k.that(inp.size(1) % 2 == 0, fmt::format("inp {} must be (R, 2F): [gate | up]", inp.str()));
  const int64_t R = inp.size(0), W = backward ? inp.size(1) : inp.size(1) / 2;
  fp8(k, out, "out");
  fp8(k, out_t, "out_t");
  k.that(out_t.dtype() == out.dtype(),
         fmt::format("out_t {} and out {} must have one FP8 dtype", out_t.str(), out.str()));
  k.that(out.numel() == R * W, fmt::format("out {} must hold ({}, {})", out.str(), R, W));
  k.dim(out_t, "out_t", 2, "(W, R): the transpose of out");
  k.that(out_t.size(0) == W && out_t.size(1) == R,
         fmt::format("out_t {} must be ({}, {}), the transpose of out", out_t.str(), W, R));
  k.that(!overlaps(out, out_t), "out and out_t must not overlap");
  return dt;
}

// Per-tensor scaling's statistics: one amax and one scale.
void check_swiglu_cast(const Checks& k, const Tensor& out, const Tensor& out_t, const Tensor& amax,
                       const Tensor& inp, const Tensor& scale, bool backward) {
  const DType dt = check_swiglu_cast(k, out, out_t, inp, backward);
  scalar(k, amax, "amax", dt);
  scalar(k, scale, "scale", dt);
}

}  // namespace

void Backend::fp8_swiglu_cast_transpose(Tensor& out, Tensor& out_t, Tensor& amax, const Tensor& inp,
                                        const Tensor& scale) {
  check_swiglu_cast(Checks(*this, "fp8_swiglu_cast_transpose"), out, out_t, amax, inp, scale, false);
  fp8_swiglu_cast_transpose_impl(out, out_t, amax, inp, scale);
}

void Backend::fp8_swiglu_backward_cast_transpose(Tensor& out, Tensor& out_t, Tensor& amax, const Tensor& inp,
                                                 const Tensor& dout, const Tensor& scale) {
  Checks k(*this, "fp8_swiglu_backward_cast_transpose");
  check_swiglu_cast(k, out, out_t, amax, inp, scale, true);
  k.like(dout, "dout", inp.dtype(), inp.numel() / 2, "(R, F): the gradient of swiglu's output");
  fp8_swiglu_backward_cast_transpose_impl(out, out_t, amax, inp, dout, scale);
}

void Backend::fp8_swiglu_cast_transpose_impl(Tensor& out, Tensor& out_t, Tensor& amax, const Tensor& inp,
                                             const Tensor& scale) {
  const int64_t R = inp.size(0), F = inp.size(1) / 2;
  Tensor act = empty({R, F}, inp.dtype());
  swiglu_forward_impl(act, inp);
  Tensor o = out.view({R, F});
  fp8_cast_transpose_impl(o, &out_t, amax, act, scale);
}

void Backend::fp8_swiglu_backward_cast_transpose_impl(Tensor& out, Tensor& out_t, Tensor& amax, const Tensor& inp,
                                                      const Tensor& dout, const Tensor& scale) {
  Tensor dinp = empty(inp.shape(), inp.dtype());
  swiglu_backward_impl(dinp, inp, dout.view({inp.size(0), inp.size(1) / 2}));
  Tensor o = out.view(inp.shape());
  fp8_cast_transpose_impl(o, &out_t, amax, dinp, scale);
}

void Backend::fp8_dequantize(Tensor& out, const Tensor& in, const Tensor& scale_inv) {
  Checks k(*this, "fp8_dequantize");
  const DType dt = k.act(out, "out");
  fp8(k, in, "in");
  k.numel(in, "in", out.numel(), "as many as out");
  scalar(k, scale_inv, "scale_inv", dt);
  fp8_dequantize_impl(out, in, scale_inv);
}

namespace {

// The operands of an FP8 GEMM (fp8_matmul, fp8_block_matmul): a (N, K) and
// b (OC, K), K-major, not both E5M2; out (N, OC). Returns out's dtype.
DType check_fp8_gemm(const Checks& k, const Tensor& out, const Tensor& a, const Tensor& b) {
  const DType dt = k.act(out, "out");
  fp8(k, a, "a");
  fp8(k, b, "b");
  k.dim(b, "b", 2, "(OC, K): K-major");
  k.that(a.dim() >= 1 && a.size(-1) == b.size(1),
         fmt::format("a {} must be (N, K) with K = {} (b {} is (OC, K))", a.str(), b.size(1), b.str()));
  k.that(!(a.dtype() == DType::E5M2 && b.dtype() == DType::E5M2),
         "a and b must not both be e5m2 (no FP8 GEMM takes two e5m2 operands; make one of them e4m3)");
  const int64_t OC = b.size(0);
  k.numel(out, "out", rows_of(a) * OC, "N * OC");
  k.that(out.size(-1) == OC, fmt::format("out {} must have width OC = {}", out.str(), OC));
  return dt;
}

}  // namespace

void Backend::fp8_matmul(Tensor& out, const Tensor& a, const Tensor& a_scale_inv, const Tensor& b,
                         const Tensor& b_scale_inv, const Tensor* bias, bool accumulate, bool fast_accum) {
  Checks k(*this, "fp8_matmul");
  const DType dt = check_fp8_gemm(k, out, a, b);
  const int64_t OC = b.size(0);
  scalar(k, a_scale_inv, "a_scale_inv", dt);
  scalar(k, b_scale_inv, "b_scale_inv", dt);
  if (bias) {
    k.like(*bias, "bias", dt, OC, "OC");
    k.that(!accumulate, "bias must be null with accumulate (out += a b^T takes no bias)");
  }
  fp8_matmul_impl(out, a, a_scale_inv, b, b_scale_inv, bias, accumulate, fast_accum);
}

void Backend::fp8_update_scale(Tensor& scale, Tensor& scale_inv, Tensor* amax_history, const Tensor& amax,
                               float fp8_max, int margin, bool use_max) {
  Checks k(*this, "fp8_update_scale");
  k.on_device(amax, "amax");
  k.that(amax.dtype() == DType::F32 || amax.dtype() == DType::F64,
         fmt::format("amax {} must be a statistics tensor (f32, or f64 on the reference)", amax.str()));
  const DType dt = amax.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const int64_t M = amax.numel();
  k.stat(scale, "scale", dt, M, "one per tensor, as amax");
  k.stat(scale_inv, "scale_inv", dt, M, "one per tensor, as amax");
  if (amax_history) {
    k.on_device(*amax_history, "amax_history");
    k.dtype(*amax_history, "amax_history", dt, "the dtype of amax");
    k.that(amax_history->dim() == 2 && amax_history->size(0) == M && amax_history->size(1) >= 1,
           fmt::format("amax_history {} must be (M, H) with M = {} (amax's numel) and H >= 1", amax_history->str(), M));
  }
  k.that(fp8_max > 0.f && std::isfinite(fp8_max), fmt::format("fp8_max {} must be positive and finite", fp8_max));
  k.that(margin >= 0 && margin < 64, fmt::format("margin {} must be in [0, 64)", margin));
  fp8_update_scale_impl(scale, scale_inv, amax_history, amax, fp8_max, margin, use_max);
}

// ---- FP8 block scaling ----

void Backend::fp8_block_cast(Tensor& out, Tensor& scale_inv, Tensor* out_t, Tensor* scale_inv_t, const Tensor& in) {
  Checks k(*this, "fp8_block_cast");
  const DType dt = k.act(in, "in");
  k.that(in.dim() >= 2, fmt::format("in {} must be (R, C): rows of C", in.str()));
  const int64_t R = rows_of(in), C = in.size(-1);
  fp8(k, out, "out");
  k.numel(out, "out", R * C, "as many as in");
  k.stat(scale_inv, "scale_inv", dt, fp8_blocks(C) * R, "ceil(C/128) * R: one per 1x128 block of a row");
  k.that((out_t == nullptr) == (scale_inv_t == nullptr), "out_t and scale_inv_t are given together");
  if (out_t) {
    fp8(k, *out_t, "out_t");
    k.that(out_t->dtype() == out.dtype(),
           fmt::format("out_t {} and out {} must have one FP8 dtype", out_t->str(), out.str()));
    k.dim(*out_t, "out_t", 2, "(C, R): the transpose of in");
    k.that(out_t->size(0) == C && out_t->size(1) == R,
           fmt::format("out_t {} must be (C, R) = ({}, {}), the transpose of in {}", out_t->str(), C, R, in.str()));
    k.stat(*scale_inv_t, "scale_inv_t", dt, fp8_blocks(R) * C, "ceil(R/128) * C: one per 128-row block of a column");
    k.that(!overlaps(out, *out_t), "out and out_t must not overlap");
  }
  fp8_block_cast_impl(out, scale_inv, out_t, scale_inv_t, in);
}

namespace {

// The block SwiGLU casts: check_swiglu_cast's operands, and scale_inv,
// scale_inv_t as fp8_block_cast's for a (R, W) input.
void check_swiglu_block_cast(const Checks& k, const Tensor& out, const Tensor& scale_inv, const Tensor& out_t,
                             const Tensor& scale_inv_t, const Tensor& inp, bool backward) {
  const DType dt = check_swiglu_cast(k, out, out_t, inp, backward);
  const int64_t R = inp.size(0), W = backward ? inp.size(1) : inp.size(1) / 2;
  k.stat(scale_inv, "scale_inv", dt, fp8_blocks(W) * R, "ceil(W/128) * R: one per 1x128 block of a row");
  k.stat(scale_inv_t, "scale_inv_t", dt, fp8_blocks(R) * W, "ceil(R/128) * W: one per 128-row block of a column");
}

}  // namespace

void Backend::fp8_swiglu_block_cast(Tensor& out, Tensor& scale_inv, Tensor& out_t, Tensor& scale_inv_t,
                                    const Tensor& inp) {
  check_swiglu_block_cast(Checks(*this, "fp8_swiglu_block_cast"), out, scale_inv, out_t, scale_inv_t, inp, false);
  fp8_swiglu_block_cast_impl(out, scale_inv, out_t, scale_inv_t, inp, nullptr);
}

void Backend::fp8_swiglu_backward_block_cast(Tensor& out, Tensor& scale_inv, Tensor& out_t, Tensor& scale_inv_t,
                                             const Tensor& inp, const Tensor& dout) {
  Checks k(*this, "fp8_swiglu_backward_block_cast");
  check_swiglu_block_cast(k, out, scale_inv, out_t, scale_inv_t, inp, true);
  k.like(dout, "dout", inp.dtype(), inp.numel() / 2, "(R, F): the gradient of swiglu's output");
  fp8_swiglu_block_cast_impl(out, scale_inv, out_t, scale_inv_t, inp, &dout);
}

void Backend::fp8_swiglu_block_cast_impl(Tensor& out, Tensor& scale_inv, Tensor& out_t, Tensor& scale_inv_t,
                                         const Tensor& inp, const Tensor* dout) {
  const int64_t R = inp.size(0), F = inp.size(1) / 2;
  Tensor v = empty({R, dout ? 2 * F : F}, inp.dtype());
  if (dout) swiglu_backward_impl(v, inp, dout->view({R, F}));
  else swiglu_forward_impl(v, inp);
  Tensor o = out.view(v.shape());
  fp8_block_cast_impl(o, scale_inv, &out_t, &scale_inv_t, v);
}

void Backend::fp8_block_cast_tiles(Tensor& out, Tensor& out_t, Tensor& scale_inv, Tensor& scale_inv_t,
                                   const Tensor& in) {
  Checks k(*this, "fp8_block_cast_tiles");
  const DType dt = k.act(in, "in");
  k.dim(in, "in", 2, "(R, C): a weight");
  const int64_t R = in.size(0), C = in.size(1);
  fp8(k, out, "out");
  fp8(k, out_t, "out_t");
  k.that(out_t.dtype() == out.dtype(), fmt::format("out_t {} and out {} must have one FP8 dtype", out_t.str(), out.str()));
  k.numel(out, "out", R * C, "as many as in");
  k.dim(out_t, "out_t", 2, "(C, R): the transpose of in");
  k.that(out_t.size(0) == C && out_t.size(1) == R,
         fmt::format("out_t {} must be (C, R) = ({}, {}), the transpose of in {}", out_t.str(), C, R, in.str()));
  k.that(!overlaps(out, out_t), "out and out_t must not overlap");
  k.stat(scale_inv, "scale_inv", dt, fp8_blocks(R) * fp8_tile_ld(C), "ceil(R/128) * fp8_tile_ld(C): one per tile");
  k.stat(scale_inv_t, "scale_inv_t", dt, fp8_blocks(C) * fp8_tile_ld(R), "ceil(C/128) * fp8_tile_ld(R)");
  fp8_block_cast_tiles_impl(out, out_t, scale_inv, scale_inv_t, in);
}

void Backend::fp8_block_matmul(Tensor& out, const Tensor& a, const Tensor& a_scale_inv, const Tensor& b,
                               const Tensor& b_scale_inv, bool b_tiles, const Tensor* bias, bool accumulate) {
  Checks k(*this, "fp8_block_matmul");
  const DType dt = check_fp8_gemm(k, out, a, b);
  const int64_t OC = b.size(0), K = b.size(1), N = rows_of(a);
  k.stat(a_scale_inv, "a_scale_inv", dt, fp8_blocks(K) * N, "ceil(K/128) * N: a's 1x128 blocks");
  if (b_tiles)
    k.stat(b_scale_inv, "b_scale_inv", dt, fp8_blocks(OC) * fp8_tile_ld(K), "ceil(OC/128) * fp8_tile_ld(K): b's tiles");
  else
    k.stat(b_scale_inv, "b_scale_inv", dt, fp8_blocks(K) * OC, "ceil(K/128) * OC: b's 1x128 blocks");
  if (bias) {
    k.like(*bias, "bias", dt, OC, "OC");
    k.that(!accumulate, "bias must be null with accumulate (out += a b^T takes no bias)");
  }
  fp8_block_matmul_impl(out, a, a_scale_inv, b, b_scale_inv, b_tiles, bias, accumulate);
}

std::string fp8_gemm_limitation(int major, int minor) {
  if (major * 10 + minor >= 89) return "";
  return fmt::format("sm_{}{} has no FP8 tensor cores (they start at sm_89: Ada, Hopper): the FP8 GEMMs run on "
                     "tripod's fallback kernel, with the same numerics and slower than bf16",
                     major, minor);
}

std::string fp8_attention_limitation(size_t cudnn_version, int major, int64_t head_size) {
  if (cudnn_version == 0) return "no cuDNN 9 is loaded (FP8 attention runs on cuDNN's)";
  if (cudnn_version < 91900)
    return fmt::format("cuDNN {} is loaded: FP8 attention needs cuDNN 9.19 or later (9.14's gave outputs that "
                       "changed between identical calls for batch > 1 on an H100, and uninitialized reads in its "
                       "dO.O kernel); put a newer libcudnn.so.9 first on LD_LIBRARY_PATH",
                       cudnn_version);
  if (major < 9) return fmt::format("compute capability {}.x (FP8 attention needs Hopper or later)", major);
  if (major == 9 && head_size != 128)
    return fmt::format("head size {} (cuDNN's FP8 attention on Hopper takes head size 128 only)", head_size);
  if (head_size % 16 != 0 || head_size > 128) return fmt::format("head size {} (multiples of 16 up to 128)", head_size);
  return "";
}

// ---- FP8 attention ----

namespace {

// The statistics dtype of FP8 attention: lse's (f32; f64 on the reference).
DType check_fp8_attention_stats(const Checks& k, const Tensor& lse, const Heads& h) {
  k.on_device(lse, "lse");
  k.that(lse.dtype() == DType::F32 || lse.dtype() == DType::F64,
         fmt::format("lse {} must be a statistics tensor (f32, or f64 on the reference)", lse.str()));
  const DType act = lse.dtype() == DType::F64 ? DType::F64 : DType::F32;
  k.stat(lse, "lse", act, h.B * h.NH * h.T, "B * n_head * T");
  return act;
}

void fp8_codes(const Checks& k, const Tensor& t, const char* name, DType d, int64_t n, const char* what) {
  k.dtype(t, name, d, "FP8 codes");
  k.numel(t, name, n, what);
}

}  // namespace

void Backend::attention_fp8_forward(Tensor& out, Tensor& lse, const Tensor& qkv, const Fp8AttentionMeta& m,
                                    int n_head, int n_kv_head) {
  Checks k(*this, "attention_fp8_forward");
  const Heads h = check_qkv(k, qkv, n_head, n_kv_head, "qkv", true);
  const DType dt = check_fp8_attention_stats(k, lse, h);
  fp8_codes(k, out, "out", DType::E4M3, h.B * h.T * h.q_width(), "B * T * n_head * HS");
  scalar(k, m.qkv_scale_inv, "qkv_scale_inv", dt);
  scalar(k, m.s_scale, "s_scale", dt);
  scalar(k, m.s_scale_inv, "s_scale_inv", dt);
  scalar(k, m.s_amax, "s_amax", dt);
  scalar(k, m.o_scale, "o_scale", dt);
  scalar(k, m.o_amax, "o_amax", dt);
  attention_fp8_forward_impl(out, lse, qkv, m, n_head, static_cast<int>(h.G));
}

void Backend::attention_fp8_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                     const Tensor& lse, const Fp8AttentionMeta& m, int n_head, int n_kv_head) {
  Checks k(*this, "attention_fp8_backward");
  const Heads h = check_qkv(k, qkv, n_head, n_kv_head, "qkv", true);
  const DType dt = check_fp8_attention_stats(k, lse, h);
  fp8_codes(k, out, "out", DType::E4M3, h.B * h.T * h.q_width(), "B * T * n_head * HS");
  fp8(k, dout, "dout");
  k.numel(dout, "dout", h.B * h.T * h.q_width(), "B * T * n_head * HS");
  fp8_codes(k, dqkv, "dqkv", dout.dtype(), qkv.numel(), "as many as qkv, in dout's FP8 dtype");
  scalar(k, m.qkv_scale_inv, "qkv_scale_inv", dt);
  scalar(k, m.o_scale_inv, "o_scale_inv", dt);
  scalar(k, m.dout_scale_inv, "dout_scale_inv", dt);
  scalar(k, m.s_scale, "s_scale", dt);
  scalar(k, m.s_scale_inv, "s_scale_inv", dt);
  scalar(k, m.dp_scale, "dp_scale", dt);
  scalar(k, m.dp_scale_inv, "dp_scale_inv", dt);
  scalar(k, m.dp_amax, "dp_amax", dt);
  scalar(k, m.dqkv_scale, "dqkv_scale", dt);
  scalar(k, m.dqkv_amax, "dqkv_amax", dt);
  attention_fp8_backward_impl(dqkv, dout, qkv, out, lse, m, n_head, static_cast<int>(h.G));
}

void Backend::attention_fp8_forward_impl(Tensor&, Tensor&, const Tensor&, const Fp8AttentionMeta&, int, int) {
  TRIPOD_CHECK_HINT(false, "leave out --fp8-dot-product-attention (attention then runs in the compute dtype)",
                    "attention_fp8_forward: the {} backend has no FP8 attention", name());
}

void Backend::attention_fp8_backward_impl(Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                          const Fp8AttentionMeta&, int, int) {
  TRIPOD_CHECK_HINT(false, "leave out --fp8-dot-product-attention (attention then runs in the compute dtype)",
                    "attention_fp8_backward: the {} backend has no FP8 attention", name());
}

}  // namespace tripod::backend
