// The CPU backend (backend/cpu/cpu_backend.h): the _impls of backend/ops.h
// for f32 or f64 tensors, calling the reference kernels of this folder; an
// op on bf16/f16 activations runs the f32 kernel on widened copies and
// rounds its outputs back (the GPU's mixed precision, emulated: half.h).
// Arguments arrive checked (backend/ops.cpp). This is the specification
// every other backend is tested against (tests/backend_ops). The fused ops
// keep the default _impls of ops.cpp (the unfused sequence).
#include "backend/cpu/cpu_backend.h"

#include <cmath>
#include <cstring>

#include "backend/cpu/elementwise.h"
#include "backend/cpu/half.h"
#include "backend/cpu/kernels.h"
#include "base/error.h"
#include "tensor/allocator.h"

namespace tripod::backend {
namespace {

// Runs BODY with T = float or double according to dtype (the validators let
// only computes_in() dtypes through; the FAIL is a guard).
#define TRIPOD_CPU_DISPATCH(dtype, BODY)                                              \
  do {                                                                                \
    if ((dtype) == DType::F32) { using T = float; BODY; }                             \
    else if ((dtype) == DType::F64) { using T = double; BODY; }                       \
    else TRIPOD_FAIL("cpu backend: dtype {} not supported (f32 and f64 only)",        \
                     dtype_name(dtype));                                              \
  } while (0)

int64_t rows(const Tensor& t) { return t.numel() / t.size(-1); }
// The bytes of an FP8 (E4M3 / E5M2) tensor.
uint8_t* fp8_data(const Tensor& t) { return static_cast<uint8_t*>(t.raw()); }

// The scalars of FP8 attention at statistics type S: the fields the forward
// (or the backward) reads, as NOTE [FP8 attention] names them; the others
// may be undefined.
template <typename S>
cpu::Fp8AttentionScalars<S> fp8_attention_scalars(const Fp8AttentionMeta& m, bool backward) {
  auto v = [](const Tensor& t) { return t.data<S>()[0]; };
  cpu::Fp8AttentionScalars<S> sc;
  sc.qkv_scale_inv = v(m.qkv_scale_inv);
  sc.s_scale = v(m.s_scale);
  sc.s_scale_inv = v(m.s_scale_inv);
  if (!backward) {
    sc.s_amax = m.s_amax.data<S>();
    sc.o_scale = v(m.o_scale);
    sc.o_amax = m.o_amax.data<S>();
    return sc;
  }
  sc.o_scale_inv = v(m.o_scale_inv);
  sc.dout_scale_inv = v(m.dout_scale_inv);
  sc.dp_scale = v(m.dp_scale);
  sc.dp_scale_inv = v(m.dp_scale_inv);
  sc.dp_amax = m.dp_amax.data<S>();
  sc.dqkv_scale = v(m.dqkv_scale);
  sc.dqkv_amax = m.dqkv_amax.data<S>();
  return sc;
}

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu(); }
  std::string name() const override { return "cpu"; }
  bool computes_in(DType d) const override {
    return d == DType::F32 || d == DType::F64 || d == DType::BF16 || d == DType::F16;  // bf16/f16: half.h
  }
  bool stores(DType d) const override {
    return d == DType::F32 || d == DType::F64 || d == DType::BF16 || d == DType::F16;
  }

  Tensor empty(const Shape& shape, DType dtype) override { return Tensor::empty(shape, dtype); }
  void zero(Tensor& t) override {
    if (t.nbytes()) std::memset(t.raw(), 0, t.nbytes());
  }
  void copy_impl(Tensor& dst, const Tensor& src) override {
    if (dst.nbytes() && dst.raw() != src.raw()) std::memmove(dst.raw(), src.raw(), dst.nbytes());
  }
  void cast_impl(Tensor& dst, const Tensor& src) override;
  void synchronize() override {}
  size_t peak_memory_bytes() const override { return allocator_for(DeviceType::CPU).peak_bytes(); }

  void add_impl(Tensor& out, const Tensor& a, const Tensor& b) override {
    if (cpu::is_half(out.dtype())) { cpu::Widened w; return add_impl(w.out(out), w.in(a), w.in(b)); }
    TRIPOD_CPU_DISPATCH(out.dtype(), cpu::add<T>(out.data<T>(), a.data<T>(), b.data<T>(), out.numel()));
  }
  void scale_impl(Tensor& t, float s) override {
    if (cpu::is_half(t.dtype())) { cpu::Widened w; return scale_impl(w.out(t), s); }
    TRIPOD_CPU_DISPATCH(t.dtype(), cpu::scale<T>(t.data<T>(), s, t.numel()));
  }
  void add_bias_impl(Tensor& out, const Tensor& bias) override {
    if (cpu::is_half(out.dtype())) { cpu::Widened w; return add_bias_impl(w.out(out), w.in(bias)); }
    TRIPOD_CPU_DISPATCH(out.dtype(),
                        cpu::add_bias<T>(out.data<T>(), bias.data<T>(), rows(out), bias.numel()));
  }

  void embedding_forward_impl(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor* wpe,
                              int64_t vocab_start) override {
    if (cpu::is_half(out.dtype())) { cpu::Widened w; return embedding_forward_impl(w.out(out), tokens, w.in(wte), w.in(wpe), vocab_start); }
    const int64_t B = tokens.size(0), Tn = tokens.size(1), C = wte.size(1);
    TRIPOD_CPU_DISPATCH(out.dtype(),
        cpu::embedding_forward<T>(out.data<T>(), tokens.data<int32_t>(), wte.data<T>(),
                                  wpe ? wpe->data<T>() : nullptr, B, Tn, C, vocab_start, wte.size(0)));
  }
  void embedding_backward_impl(Tensor* dwte, Tensor* dwpe, const Tensor& dout, const Tensor& tokens,
                               int64_t vocab_start) override {
    if (cpu::is_half(dout.dtype())) { cpu::Widened w; return embedding_backward_impl(w.out(dwte), w.out(dwpe), w.in(dout), tokens, vocab_start); }
    const int64_t B = tokens.size(0), Tn = tokens.size(1), C = dout.size(-1);
    TRIPOD_CPU_DISPATCH(dout.dtype(),
        cpu::embedding_backward<T>(dwte ? dwte->data<T>() : nullptr, dwpe ? dwpe->data<T>() : nullptr,
                                   dout.data<T>(), tokens.data<int32_t>(), B, Tn, C, vocab_start,
                                   dwte ? dwte->size(0) : 0));
  }

  void layernorm_forward_impl(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                              const Tensor& weight, const Tensor& bias, float eps) override {
    if (cpu::is_half(inp.dtype())) { cpu::Widened w; return layernorm_forward_impl(w.out(out), mean, rstd, w.in(inp), w.in(weight), w.in(bias), eps); }
    const int64_t C = inp.size(-1), N = rows(inp);
    TRIPOD_CPU_DISPATCH(inp.dtype(),
        cpu::layernorm_forward<T>(out.data<T>(), mean.data<cpu::stat_t<T>>(), rstd.data<cpu::stat_t<T>>(),
                                  inp.data<T>(), weight.data<T>(), bias.data<T>(), N, C, eps));
  }
  void layernorm_backward_impl(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                               const Tensor& inp, const Tensor& weight, const Tensor& mean,
                               const Tensor& rstd, Tensor* out, const Tensor* bias) override {
    if (cpu::is_half(inp.dtype())) { cpu::Widened w; return layernorm_backward_impl(w.out(dinp), w.out(dweight), w.out(dbias), w.in(dout), w.in(inp),
                                                                  w.in(weight), mean, rstd, w.out(out), w.in(bias)); }
    const int64_t C = inp.size(-1), N = rows(inp);
    TRIPOD_CPU_DISPATCH(inp.dtype(),
        cpu::layernorm_backward<T>(dinp.data<T>(), dweight.data<T>(), dbias.data<T>(), dout.data<T>(),
                                   inp.data<T>(), weight.data<T>(), mean.data<cpu::stat_t<T>>(),
                                   rstd.data<cpu::stat_t<T>>(), N, C, out ? out->data<T>() : nullptr,
                                   bias ? bias->data<T>() : nullptr));
  }

  void matmul_forward_impl(Tensor& out, const Tensor& inp, const Tensor& weight,
                           const Tensor* bias) override {
    if (cpu::is_half(inp.dtype())) { cpu::Widened w; return matmul_forward_impl(w.out(out), w.in(inp), w.in(weight), w.in(bias)); }
    const int64_t C = inp.size(-1), N = rows(inp), OC = weight.size(0);
    TRIPOD_CPU_DISPATCH(inp.dtype(), cpu::matmul_forward<T>(out.data<T>(), inp.data<T>(), weight.data<T>(),
                                                            bias ? bias->data<T>() : nullptr, N, C, OC));
  }
  void matmul_backward_impl(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                            const Tensor& inp, const Tensor& weight) override {
    if (cpu::is_half(inp.dtype())) { cpu::Widened w; return matmul_backward_impl(w.out(dinp), w.out(dweight), w.out(dbias), w.in(dout), w.in(inp),
                                                                w.in(weight)); }
    const int64_t C = inp.size(-1), N = rows(inp), OC = weight.size(0);
    TRIPOD_CPU_DISPATCH(inp.dtype(),
        cpu::matmul_backward<T>(dinp ? dinp->data<T>() : nullptr, dweight ? dweight->data<T>() : nullptr,
                                dbias ? dbias->data<T>() : nullptr, dout.data<T>(), inp.data<T>(),
                                weight.data<T>(), N, C, OC));
  }

  void gelu_forward_impl(Tensor& out, const Tensor& inp) override {
    if (cpu::is_half(inp.dtype())) { cpu::Widened w; return gelu_forward_impl(w.out(out), w.in(inp)); }
    TRIPOD_CPU_DISPATCH(inp.dtype(), cpu::gelu_forward<T>(out.data<T>(), inp.data<T>(), inp.numel()));
  }
  void gelu_backward_impl(Tensor& dinp, const Tensor& inp, const Tensor& dout) override {
    if (cpu::is_half(inp.dtype())) { cpu::Widened w; return gelu_backward_impl(w.out(dinp), w.in(inp), w.in(dout)); }
    TRIPOD_CPU_DISPATCH(inp.dtype(), cpu::gelu_backward<T>(dinp.data<T>(), inp.data<T>(), dout.data<T>(), inp.numel()));
  }

  void attention_forward_impl(Tensor& out, Tensor& lse, const Tensor& qkv, int n_head, int n_kv_head) override {
    if (cpu::is_half(qkv.dtype())) { cpu::Widened w; return attention_forward_impl(w.out(out), lse, w.in(qkv), n_head, n_kv_head); }
    const int64_t B = qkv.size(0), Tn = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv_head);
    TRIPOD_CPU_DISPATCH(qkv.dtype(), cpu::attention_forward<T>(out.data<T>(), lse.data<cpu::stat_t<T>>(),
                                                               qkv.data<T>(), B, Tn, n_head, n_kv_head, HS));
  }
  void attention_backward_impl(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                               const Tensor& lse, int n_head, int n_kv_head) override {
    if (cpu::is_half(qkv.dtype())) { cpu::Widened w; return attention_backward_impl(w.out(dqkv), w.in(dout), w.in(qkv), w.in(out), lse, n_head, n_kv_head); }
    const int64_t B = qkv.size(0), Tn = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv_head);
    TRIPOD_CPU_DISPATCH(qkv.dtype(),
        cpu::attention_backward<T>(dqkv.data<T>(), dout.data<T>(), qkv.data<T>(), out.data<T>(),
                                   lse.data<cpu::stat_t<T>>(), B, Tn, n_head, n_kv_head, HS));
  }

  void rmsnorm_forward_impl(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                            float eps) override {
    if (cpu::is_half(inp.dtype())) { cpu::Widened w; return rmsnorm_forward_impl(w.out(out), rstd, w.in(inp), w.in(weight), eps); }
    const int64_t C = inp.size(-1), N = rows(inp);
    TRIPOD_CPU_DISPATCH(inp.dtype(), cpu::rmsnorm_forward<T>(out.data<T>(), rstd.data<cpu::stat_t<T>>(),
                                                             inp.data<T>(), weight.data<T>(), N, C, eps));
  }
  void rmsnorm_backward_impl(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                             const Tensor& weight, const Tensor& rstd) override {
    if (cpu::is_half(inp.dtype())) { cpu::Widened w; return rmsnorm_backward_impl(w.out(dinp), w.out(dweight), w.in(dout), w.in(inp), w.in(weight), rstd); }
    const int64_t C = inp.size(-1), N = rows(inp);
    TRIPOD_CPU_DISPATCH(inp.dtype(),
        cpu::rmsnorm_backward<T>(dinp.data<T>(), dweight.data<T>(), dout.data<T>(), inp.data<T>(),
                                 weight.data<T>(), rstd.data<cpu::stat_t<T>>(), N, C));
  }
  void rope_impl(Tensor& qkv, int n_head, int n_kv_head, int64_t rot_dim, float base, bool backward) override {
    if (cpu::is_half(qkv.dtype())) { cpu::Widened w; return rope_impl(w.out(qkv), n_head, n_kv_head, rot_dim, base, backward); }
    const int64_t B = qkv.size(0), Tn = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv_head);
    TRIPOD_CPU_DISPATCH(qkv.dtype(), cpu::rope<T>(qkv.data<T>(), B, Tn, n_head, n_kv_head, HS, rot_dim, base,
                                                  backward));
  }
  void rope_positions_impl(Tensor& qkv, int n_head, int n_kv_head, int64_t rot_dim, float base, bool backward,
                           const Tensor& positions) override {
    if (cpu::is_half(qkv.dtype())) { cpu::Widened w; return rope_positions_impl(w.out(qkv), n_head, n_kv_head, rot_dim, base, backward, positions); }
    const int64_t B = qkv.size(0), Tn = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv_head);
    TRIPOD_CPU_DISPATCH(qkv.dtype(), cpu::rope<T>(qkv.data<T>(), B, Tn, n_head, n_kv_head, HS, rot_dim, base,
                                                  backward, positions.data<int32_t>()));
  }
  void gather_rows_impl(Tensor& out, const Tensor& inp, const Tensor& index) override {
    const size_t row = static_cast<size_t>(inp.size(1)) * dtype_size(inp.dtype());
    const int32_t* idx = index.data<int32_t>();
    const char* src = static_cast<const char*>(inp.raw());
    char* dst = static_cast<char*>(out.raw());
    for (int64_t r = 0; r < out.size(0); ++r) {
      TRIPOD_CHECK(idx[r] >= 0 && idx[r] < inp.size(0), "gather_rows: index[{}] = {} must lie in [0, {})", r,
                   idx[r], inp.size(0));
      std::memcpy(dst + static_cast<size_t>(r) * row, src + static_cast<size_t>(idx[r]) * row, row);
    }
  }
  void attention_kv_copy_impl(Tensor& dst, const Tensor& src, int n_head, int n_kv_head) override {
    if (cpu::is_half(src.dtype())) { cpu::Widened w; return attention_kv_copy_impl(w.out(dst), w.in(src), n_head, n_kv_head); }
    const bool from_qkv = src.size(2) > dst.size(2);
    const Tensor& qkv = from_qkv ? src : dst;
    const int64_t B = qkv.size(0), Tn = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv_head);
    TRIPOD_CPU_DISPATCH(src.dtype(), cpu::attention_kv_copy<T>(dst.data<T>(), src.data<T>(), B, Tn, n_head,
                                                               n_kv_head, HS, from_qkv));
  }
  void attention_block_forward_impl(Tensor& out, Tensor& lse, const Tensor& qkv, const Tensor& kv, int n_head,
                                    int n_kv_head, const AttentionBlock& blk, bool accumulate) override {
    if (cpu::is_half(qkv.dtype())) {
      cpu::Widened w;
      return attention_block_forward_impl(w.out(out), lse, w.in(qkv), w.in(kv), n_head, n_kv_head, blk, accumulate);
    }
    const int64_t B = qkv.size(0), Tq = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv_head);
    const cpu::BlockWindow w{blk.q_start, blk.q_len, blk.kv_start, blk.kv_len, blk.causal};
    TRIPOD_CPU_DISPATCH(qkv.dtype(), cpu::attention_block_forward<T>(
                                         out.data<T>(), lse.data<cpu::stat_t<T>>(), qkv.data<T>(), kv.data<T>(), B,
                                         Tq, kv.size(1), n_head, n_kv_head, HS, w, accumulate));
  }
  void attention_block_backward_impl(Tensor& dqkv, Tensor& dkv, const Tensor& dout, const Tensor& qkv,
                                     const Tensor& kv, const Tensor& out, const Tensor& lse, int n_head,
                                     int n_kv_head, const AttentionBlock& blk) override {
    if (cpu::is_half(qkv.dtype())) {
      cpu::Widened w;
      return attention_block_backward_impl(w.out(dqkv), w.out(dkv), w.in(dout), w.in(qkv), w.in(kv), w.in(out), lse,
                                           n_head, n_kv_head, blk);
    }
    const int64_t B = qkv.size(0), Tq = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv_head);
    const cpu::BlockWindow w{blk.q_start, blk.q_len, blk.kv_start, blk.kv_len, blk.causal};
    TRIPOD_CPU_DISPATCH(qkv.dtype(), cpu::attention_block_backward<T>(
                                         dqkv.data<T>(), dkv.data<T>(), dout.data<T>(), qkv.data<T>(),
                                         kv.data<T>(), out.data<T>(), lse.data<cpu::stat_t<T>>(), B, Tq,
                                         kv.size(1), n_head, n_kv_head, HS, w));
  }
  void swiglu_forward_impl(Tensor& out, const Tensor& inp) override {
    if (cpu::is_half(inp.dtype())) { cpu::Widened w; return swiglu_forward_impl(w.out(out), w.in(inp)); }
    const int64_t F = out.size(-1);
    TRIPOD_CPU_DISPATCH(inp.dtype(), cpu::swiglu_forward<T>(out.data<T>(), inp.data<T>(), rows(inp), F));
  }
  void swiglu_backward_impl(Tensor& dinp, const Tensor& inp, const Tensor& dout) override {
    if (cpu::is_half(inp.dtype())) { cpu::Widened w; return swiglu_backward_impl(w.out(dinp), w.in(inp), w.in(dout)); }
    const int64_t F = dout.size(-1);
    TRIPOD_CPU_DISPATCH(inp.dtype(),
        cpu::swiglu_backward<T>(dinp.data<T>(), inp.data<T>(), dout.data<T>(), rows(inp), F));
  }

  void dropout_forward_impl(Tensor& out, const Tensor& inp, float p, uint64_t seed,
                            uint64_t offset) override {
    if (cpu::is_half(inp.dtype())) { cpu::Widened w; return dropout_forward_impl(w.out(out), w.in(inp), p, seed, offset); }
    TRIPOD_CPU_DISPATCH(inp.dtype(), cpu::dropout<T>(out.data<T>(), inp.data<T>(), inp.numel(), p, seed, offset));
  }
  void dropout_backward_impl(Tensor& dinp, const Tensor& dout, float p, uint64_t seed,
                             uint64_t offset) override {
    if (cpu::is_half(dout.dtype())) { cpu::Widened w; return dropout_backward_impl(w.out(dinp), w.in(dout), p, seed, offset); }
    // The same mask and scale apply to the gradient.
    TRIPOD_CPU_DISPATCH(dout.dtype(), cpu::dropout<T>(dinp.data<T>(), dout.data<T>(), dout.numel(), p, seed, offset));
  }

  void ce_row_max_impl(Tensor& row_max, const Tensor& logits) override {
    if (cpu::is_half(logits.dtype())) { cpu::Widened w; return ce_row_max_impl(row_max, w.in(logits)); }
    TRIPOD_CPU_DISPATCH(logits.dtype(), cpu::ce_row_max<T>(row_max.data<cpu::stat_t<T>>(), logits.data<T>(),
                                                           rows(logits), logits.size(-1)));
  }
  void ce_row_sums_impl(Tensor& sums, const Tensor& logits, const Tensor& row_max,
                        const Tensor& targets, int64_t vocab_start) override {
    if (cpu::is_half(logits.dtype())) { cpu::Widened w; return ce_row_sums_impl(sums, w.in(logits), row_max, targets, vocab_start); }
    const int64_t N = rows(logits);
    TRIPOD_CPU_DISPATCH(logits.dtype(),
        cpu::ce_row_sums<T>(sums.data<cpu::stat_t<T>>(), logits.data<T>(), row_max.data<cpu::stat_t<T>>(),
                            targets.data<int32_t>(), N, logits.size(-1), vocab_start));
  }
  void ce_loss_impl(Tensor& losses, const Tensor& sums, const Tensor& row_max) override;
  void ce_backward_impl(Tensor& dlogits, const Tensor& logits, const Tensor& row_max, const Tensor& sums,
                        const Tensor& targets, int64_t vocab_start, float dloss) override {
    if (cpu::is_half(logits.dtype())) { cpu::Widened w; return ce_backward_impl(w.out(dlogits), w.in(logits), row_max, sums, targets, vocab_start, dloss); }
    TRIPOD_CPU_DISPATCH(logits.dtype(),
        cpu::ce_backward<T>(dlogits.data<T>(), logits.data<T>(), row_max.data<cpu::stat_t<T>>(),
                            sums.data<cpu::stat_t<T>>(), targets.data<int32_t>(), rows(logits),
                            logits.size(-1), vocab_start, dloss));
  }

  void adamw_update_impl(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                         const AdamWStep& s) override {
    TRIPOD_CPU_DISPATCH(param.dtype(),
        cpu::adamw_update<T>(param.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>(), param.numel(),
                             s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.step, s.grad_scale));
  }
  void sum_squares_impl(Tensor& acc, const Tensor& x) override {
    if (cpu::is_half(x.dtype())) { cpu::Widened w; return sum_squares_impl(acc, w.in(x)); }
    double s = 0;
    TRIPOD_CPU_DISPATCH(x.dtype(), s = cpu::sum_squares<T>(x.data<T>(), x.numel()));
    TRIPOD_CPU_DISPATCH(acc.dtype(), acc.data<T>()[0] += static_cast<T>(s));
  }

  // ---- FP8 (fp8.cpp) ----
  void fp8_cast_transpose_impl(Tensor& out, Tensor* out_t, Tensor& amax, const Tensor& in,
                               const Tensor& scale) override {
    if (cpu::is_half(in.dtype())) { cpu::Widened w; return fp8_cast_transpose_impl(out, out_t, amax, w.in(in), scale); }
    const int64_t C = in.size(-1);
    TRIPOD_CPU_DISPATCH(in.dtype(),
        cpu::fp8_cast_transpose<T>(fp8_data(out), out_t ? fp8_data(*out_t) : nullptr, amax.data<cpu::stat_t<T>>(),
                                   in.data<T>(), scale.data<cpu::stat_t<T>>()[0], C ? in.numel() / C : 0, C,
                                   out.dtype()));
  }
  void fp8_dequantize_impl(Tensor& out, const Tensor& in, const Tensor& scale_inv) override {
    if (cpu::is_half(out.dtype())) { cpu::Widened w; return fp8_dequantize_impl(w.out(out), in, scale_inv); }
    TRIPOD_CPU_DISPATCH(out.dtype(), cpu::fp8_dequantize<T>(out.data<T>(), fp8_data(in),
                                                            scale_inv.data<cpu::stat_t<T>>()[0], out.numel(),
                                                            in.dtype()));
  }
  void fp8_matmul_impl(Tensor& out, const Tensor& a, const Tensor& a_scale_inv, const Tensor& b,
                       const Tensor& b_scale_inv, const Tensor* bias, bool accumulate,
                       bool /*fast_accum: the reference accumulates exactly*/) override {
    if (cpu::is_half(out.dtype())) {
      cpu::Widened w;
      return fp8_matmul_impl(w.out(out), a, a_scale_inv, b, b_scale_inv, w.in(bias), accumulate, false);
    }
    const int64_t K = b.size(1), OC = b.size(0), N = K ? a.numel() / K : 0;
    TRIPOD_CPU_DISPATCH(out.dtype(),
        cpu::fp8_matmul<T>(out.data<T>(), fp8_data(a), a.dtype(), a_scale_inv.data<cpu::stat_t<T>>()[0],
                           fp8_data(b), b.dtype(), b_scale_inv.data<cpu::stat_t<T>>()[0],
                           bias ? bias->data<T>() : nullptr, accumulate, N, K, OC));
  }
  void fp8_block_cast_impl(Tensor& out, Tensor& scale_inv, Tensor* out_t, Tensor* scale_inv_t,
                           const Tensor& in) override {
    if (cpu::is_half(in.dtype())) { cpu::Widened w; return fp8_block_cast_impl(out, scale_inv, out_t, scale_inv_t, w.in(in)); }
    const int64_t C = in.size(-1);
    TRIPOD_CPU_DISPATCH(in.dtype(),
        cpu::fp8_block_cast<T>(fp8_data(out), scale_inv.data<cpu::stat_t<T>>(), out_t ? fp8_data(*out_t) : nullptr,
                               scale_inv_t ? scale_inv_t->data<cpu::stat_t<T>>() : nullptr, in.data<T>(),
                               C ? in.numel() / C : 0, C, out.dtype()));
  }
  void fp8_block_cast_tiles_impl(Tensor& out, Tensor& out_t, Tensor& scale_inv, Tensor& scale_inv_t,
                                 const Tensor& in) override {
    if (cpu::is_half(in.dtype())) { cpu::Widened w; return fp8_block_cast_tiles_impl(out, out_t, scale_inv, scale_inv_t, w.in(in)); }
    TRIPOD_CPU_DISPATCH(in.dtype(),
        cpu::fp8_block_cast_tiles<T>(fp8_data(out), fp8_data(out_t), scale_inv.data<cpu::stat_t<T>>(),
                                     scale_inv_t.data<cpu::stat_t<T>>(), in.data<T>(), in.size(0), in.size(1),
                                     out.dtype()));
  }
  void fp8_block_matmul_impl(Tensor& out, const Tensor& a, const Tensor& a_scale_inv, const Tensor& b,
                             const Tensor& b_scale_inv, bool b_tiles, const Tensor* bias, bool accumulate) override {
    if (cpu::is_half(out.dtype())) {
      cpu::Widened w;
      return fp8_block_matmul_impl(w.out(out), a, a_scale_inv, b, b_scale_inv, b_tiles, w.in(bias), accumulate);
    }
    const int64_t K = b.size(1), OC = b.size(0), N = K ? a.numel() / K : 0;
    TRIPOD_CPU_DISPATCH(out.dtype(),
        cpu::fp8_block_matmul<T>(out.data<T>(), fp8_data(a), a.dtype(), a_scale_inv.data<cpu::stat_t<T>>(),
                                 fp8_data(b), b.dtype(), b_scale_inv.data<cpu::stat_t<T>>(), b_tiles,
                                 bias ? bias->data<T>() : nullptr, accumulate, N, K, OC));
  }
  void fp8_update_scale_impl(Tensor& scale, Tensor& scale_inv, Tensor* amax_history, const Tensor& amax,
                             float fp8_max, int margin, bool use_max) override {
    const int64_t M = amax.numel(), H = amax_history ? amax_history->size(1) : 0;
    if (amax.dtype() == DType::F64)
      cpu::fp8_update_scale<double>(scale.data<double>(), scale_inv.data<double>(),
                                    amax_history ? amax_history->data<double>() : nullptr, amax.data<double>(), M, H,
                                    fp8_max, margin, use_max);
    else
      cpu::fp8_update_scale<float>(scale.data<float>(), scale_inv.data<float>(),
                                   amax_history ? amax_history->data<float>() : nullptr, amax.data<float>(), M, H,
                                   fp8_max, margin, use_max);
  }

  // ---- FP8 attention (fp8_attention.cpp); T: the statistics type (lse's) ----
  void attention_fp8_forward_impl(Tensor& out, Tensor& lse, const Tensor& qkv, const Fp8AttentionMeta& m,
                                  int n_head, int n_kv_head) override {
    const int64_t B = qkv.size(0), Tn = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv_head);
    TRIPOD_CPU_DISPATCH(lse.dtype(),
        cpu::attention_fp8_forward<T>(fp8_data(out), lse.data<T>(), fp8_data(qkv), fp8_attention_scalars<T>(m, false),
                                      B, Tn, n_head, n_kv_head, HS));
  }
  void attention_fp8_backward_impl(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                   const Tensor& lse, const Fp8AttentionMeta& m, int n_head, int n_kv_head) override {
    const int64_t B = qkv.size(0), Tn = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv_head);
    TRIPOD_CPU_DISPATCH(lse.dtype(),
        cpu::attention_fp8_backward<T>(fp8_data(dqkv), fp8_data(dout), fp8_data(qkv), fp8_data(out), lse.data<T>(),
                                       fp8_attention_scalars<T>(m, true), dout.dtype(), B, Tn, n_head, n_kv_head,
                                       HS));
  }

  // ---- mixture of experts (cpu/moe.cpp); S: the statistics dtype of the router tensors ----
  void moe_router_topk_impl(Tensor& probs, Tensor& indices, const Tensor& logits, const Tensor* bias,
                            const MoeRouting& r) override {
    TRIPOD_CPU_DISPATCH(logits.dtype(),
        cpu::moe_router_topk<T>(probs.data<T>(), indices.data<int32_t>(), logits.data<T>(),
                                bias ? bias->data<T>() : nullptr, logits.size(0), logits.size(1), r.topk, r.sigmoid,
                                r.pre_softmax, r.scaling_factor));
  }
  void moe_router_topk_backward_impl(Tensor& dlogits, const Tensor& dprobs, const Tensor& logits,
                                     const Tensor& indices, const MoeRouting& r) override {
    TRIPOD_CPU_DISPATCH(logits.dtype(),
        cpu::moe_router_topk_backward<T>(dlogits.data<T>(), dprobs.data<T>(), logits.data<T>(),
                                         indices.data<int32_t>(), logits.size(0), logits.size(1), r.topk, r.sigmoid,
                                         r.pre_softmax, r.scaling_factor));
  }
  void moe_aux_loss_impl(Tensor* dlogits, Tensor& losses, const Tensor& logits, const MoeAuxLoss& a) override {
    TRIPOD_CPU_DISPATCH(logits.dtype(),
        cpu::moe_aux_loss<T>(dlogits ? dlogits->data<T>() : nullptr, losses.data<T>(), logits.data<T>(),
                             logits.size(0), logits.size(1), a.topk, a.sigmoid, a.seq_length, a.aux_coeff, a.z_coeff,
                             a.grad_scale));
  }
  void moe_permute_map_impl(Tensor& row_map, Tensor& counts, const Tensor& indices, const Tensor& probs,
                            int64_t E, int64_t capacity, bool drop_by_probs) override {
    TRIPOD_CPU_DISPATCH(probs.dtype(),
        cpu::moe_permute_map<T>(row_map.data<int32_t>(), counts.data<int32_t>(), indices.data<int32_t>(),
                                probs.data<T>(), indices.numel(), E, capacity, drop_by_probs));
  }
  void moe_permute_impl(Tensor& out, const Tensor& inp, const Tensor& row_map, int k) override {
    if (cpu::is_half(out.dtype())) { cpu::Widened w; return moe_permute_impl(w.out(out), w.in(inp), row_map, k); }
    TRIPOD_CPU_DISPATCH(inp.dtype(), cpu::moe_permute<T>(out.data<T>(), inp.data<T>(), row_map.data<int32_t>(),
                                                         out.size(0), out.size(1), k));
  }
  void moe_permute_backward_impl(Tensor& dinp, const Tensor& dout, const Tensor& row_map, int k) override {
    if (cpu::is_half(dinp.dtype())) {
      cpu::Widened w;
      return moe_permute_backward_impl(w.out(dinp), w.in(dout), row_map, k);
    }
    TRIPOD_CPU_DISPATCH(dinp.dtype(),
        cpu::moe_unpermute<T>(dinp.data<T>(), dout.data<T>(), row_map.data<int32_t>(), nullptr, dinp.size(0),
                              dout.size(0), dinp.size(1), k));
  }
  void moe_unpermute_impl(Tensor& out, const Tensor& inp, const Tensor& row_map, const Tensor& probs) override {
    if (cpu::is_half(out.dtype())) { cpu::Widened w; return moe_unpermute_impl(w.out(out), w.in(inp), row_map, probs); }
    TRIPOD_CPU_DISPATCH(out.dtype(),
        cpu::moe_unpermute<T>(out.data<T>(), inp.data<T>(), row_map.data<int32_t>(), probs.data<cpu::stat_t<T>>(),
                              out.size(0), inp.size(0), out.size(1), static_cast<int>(probs.size(1))));
  }
  void moe_unpermute_backward_impl(Tensor& dinp, Tensor& dprobs, const Tensor& dout, const Tensor& inp,
                                   const Tensor& row_map, const Tensor& probs) override {
    if (cpu::is_half(dout.dtype())) {
      cpu::Widened w;
      return moe_unpermute_backward_impl(w.out(dinp), dprobs, w.in(dout), w.in(inp), row_map, probs);
    }
    TRIPOD_CPU_DISPATCH(dout.dtype(),
        cpu::moe_unpermute_backward<T>(dinp.data<T>(), dprobs.data<cpu::stat_t<T>>(), dout.data<T>(), inp.data<T>(),
                                       row_map.data<int32_t>(), probs.data<cpu::stat_t<T>>(), dout.size(0),
                                       inp.size(0), dout.size(1), static_cast<int>(probs.size(1))));
  }
};

void CpuBackend::cast_impl(Tensor& dst, const Tensor& src) {
  const int64_t n = src.numel();
  auto load = [&](int64_t i) -> double {
    switch (src.dtype()) {
      case DType::F32: return src.data<float>()[i];
      case DType::F64: return src.data<double>()[i];
      case DType::BF16: return bf16_to_f32(src.data_u16()[i]);
      case DType::F16: return f16_to_f32(src.data_u16()[i]);
      default: TRIPOD_FAIL("cast from {} not supported", dtype_name(src.dtype()));
    }
  };
  for (int64_t i = 0; i < n; ++i) {
    const double x = load(i);
    switch (dst.dtype()) {
      case DType::F32: dst.data<float>()[i] = static_cast<float>(x); break;
      case DType::F64: dst.data<double>()[i] = x; break;
      case DType::BF16: dst.data_u16()[i] = f32_to_bf16(static_cast<float>(x)); break;
      case DType::F16: dst.data_u16()[i] = f32_to_f16(static_cast<float>(x)); break;
      default: TRIPOD_FAIL("cast to {} not supported", dtype_name(dst.dtype()));
    }
  }
}

void CpuBackend::ce_loss_impl(Tensor& losses, const Tensor& sums, const Tensor& row_max) {
  const int64_t N = row_max.numel();
  TRIPOD_CPU_DISPATCH(row_max.dtype(), {
    const T* s = sums.data<T>();
    const T* m = row_max.data<T>();
    T* l = losses.data<T>();
    for (int64_t i = 0; i < N; ++i) l[i] = static_cast<T>(std::log(static_cast<double>(s[i])) + m[i] - s[N + i]);
  });
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace tripod::backend
