// The CPU backend: checks shapes and dtypes, then calls the reference
// kernels of this folder for f32 or f64 tensors. This is the specification
// every other backend is tested against (tests/backend_ops).
#include <cmath>
#include <cstring>

#include "backend/cpu/elementwise.h"
#include "backend/cpu/kernels.h"
#include "backend/ops.h"
#include "base/error.h"
#include "tensor/allocator.h"

namespace tripod::backend {
namespace {

// Runs BODY with T = float or double according to dtype.
#define TRIPOD_CPU_DISPATCH(dtype, BODY)                                              \
  do {                                                                                \
    if ((dtype) == DType::F32) { using T = float; BODY; }                             \
    else if ((dtype) == DType::F64) { using T = double; BODY; }                       \
    else TRIPOD_FAIL("cpu backend: dtype {} not supported (f32 and f64 only)",        \
                     dtype_name(dtype));                                              \
  } while (0)

void same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  TRIPOD_CHECK(a.dtype() == b.dtype(), "{}: dtype mismatch {} vs {}", op, a.str(), b.str());
}
DType stat_dtype(DType act) { return act == DType::F64 ? DType::F64 : DType::F32; }
void check_stat(const Tensor& s, DType act, int64_t n, const char* op) {
  TRIPOD_CHECK(s.dtype() == stat_dtype(act) && s.numel() == n, "{}: statistics tensor {} must be {} with {} elements",
               op, s.str(), dtype_name(stat_dtype(act)), n);
}
int64_t rows(const Tensor& t) { return t.numel() / t.size(-1); }

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu(); }
  std::string name() const override { return "cpu"; }

  Tensor empty(const Shape& shape, DType dtype) override { return Tensor::empty(shape, dtype); }
  void zero(Tensor& t) override {
    if (t.nbytes()) std::memset(t.raw(), 0, t.nbytes());
  }
  void copy(Tensor& dst, const Tensor& src) override {
    TRIPOD_CHECK(dst.numel() == src.numel() && dst.dtype() == src.dtype(), "copy: {} <- {}",
                 dst.str(), src.str());
    if (dst.nbytes() && dst.raw() != src.raw()) std::memmove(dst.raw(), src.raw(), dst.nbytes());
  }
  void cast(Tensor& dst, const Tensor& src) override;
  void synchronize() override {}
  size_t peak_memory_bytes() const override { return allocator_for(DeviceType::CPU).peak_bytes(); }

  void add(Tensor& out, const Tensor& a, const Tensor& b) override {
    TRIPOD_CHECK(out.numel() == a.numel() && a.numel() == b.numel(), "add: sizes {} {} {}",
                 out.str(), a.str(), b.str());
    TRIPOD_CPU_DISPATCH(out.dtype(), cpu::add<T>(out.data<T>(), a.data<T>(), b.data<T>(), out.numel()));
  }
  void scale(Tensor& t, float s) override {
    TRIPOD_CPU_DISPATCH(t.dtype(), cpu::scale<T>(t.data<T>(), s, t.numel()));
  }
  void add_bias(Tensor& out, const Tensor& bias) override {
    TRIPOD_CHECK(out.size(-1) == bias.numel(), "add_bias: {} + {}", out.str(), bias.str());
    TRIPOD_CPU_DISPATCH(out.dtype(),
                        cpu::add_bias<T>(out.data<T>(), bias.data<T>(), rows(out), bias.numel()));
  }

  void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor* wpe,
                         int64_t vocab_start) override {
    const int64_t B = tokens.size(0), Tn = tokens.size(1), C = wte.size(1);
    check_shape(out, {B, Tn, C}, "embedding_forward out");
    if (wpe) TRIPOD_CHECK(wpe->size(0) >= Tn && wpe->size(1) == C, "embedding_forward: wpe {} too small", wpe->str());
    TRIPOD_CPU_DISPATCH(out.dtype(),
        cpu::embedding_forward<T>(out.data<T>(), tokens.data<int32_t>(), wte.data<T>(),
                                  wpe ? wpe->data<T>() : nullptr, B, Tn, C, vocab_start, wte.size(0)));
  }
  void embedding_backward(Tensor* dwte, Tensor* dwpe, const Tensor& dout, const Tensor& tokens,
                          int64_t vocab_start) override {
    const int64_t B = tokens.size(0), Tn = tokens.size(1), C = dout.size(-1);
    check_shape(dout, {B, Tn, C}, "embedding_backward dout");
    TRIPOD_CPU_DISPATCH(dout.dtype(),
        cpu::embedding_backward<T>(dwte ? dwte->data<T>() : nullptr, dwpe ? dwpe->data<T>() : nullptr,
                                   dout.data<T>(), tokens.data<int32_t>(), B, Tn, C, vocab_start,
                                   dwte ? dwte->size(0) : 0));
  }

  void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias, float eps) override {
    const int64_t C = inp.size(-1), N = rows(inp);
    TRIPOD_CHECK(out.numel() == inp.numel() && weight.numel() == C && bias.numel() == C,
                 "layernorm_forward: out {} inp {} weight {} bias {}", out.str(), inp.str(), weight.str(), bias.str());
    check_stat(mean, inp.dtype(), N, "layernorm_forward");
    check_stat(rstd, inp.dtype(), N, "layernorm_forward");
    TRIPOD_CPU_DISPATCH(inp.dtype(),
        cpu::layernorm_forward<T>(out.data<T>(), mean.data<cpu::stat_t<T>>(), rstd.data<cpu::stat_t<T>>(),
                                  inp.data<T>(), weight.data<T>(), bias.data<T>(), N, C, eps));
  }
  void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                          const Tensor& inp, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd) override {
    const int64_t C = inp.size(-1), N = rows(inp);
    TRIPOD_CHECK(dinp.numel() == inp.numel() && dout.numel() == inp.numel() && dweight.numel() == C &&
                 dbias.numel() == C, "layernorm_backward: shapes");
    TRIPOD_CPU_DISPATCH(inp.dtype(),
        cpu::layernorm_backward<T>(dinp.data<T>(), dweight.data<T>(), dbias.data<T>(), dout.data<T>(),
                                   inp.data<T>(), weight.data<T>(), mean.data<cpu::stat_t<T>>(),
                                   rstd.data<cpu::stat_t<T>>(), N, C));
  }

  void matmul_forward(Tensor& out, const Tensor& inp, const Tensor& weight,
                      const Tensor* bias) override {
    const int64_t C = inp.size(-1), N = rows(inp), OC = weight.size(0);
    TRIPOD_CHECK(weight.size(1) == C && out.numel() == N * OC && (!bias || bias->numel() == OC),
                 "matmul_forward: out {} = inp {} @ weight {}^T", out.str(), inp.str(), weight.str());
    same_dtype(out, inp, "matmul_forward");
    same_dtype(weight, inp, "matmul_forward");
    TRIPOD_CPU_DISPATCH(inp.dtype(), cpu::matmul_forward<T>(out.data<T>(), inp.data<T>(), weight.data<T>(),
                                                            bias ? bias->data<T>() : nullptr, N, C, OC));
  }
  void matmul_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& weight) override {
    const int64_t C = inp.size(-1), N = rows(inp), OC = weight.size(0);
    TRIPOD_CHECK(dout.numel() == N * OC && (!dinp || dinp->numel() == N * C) &&
                 (!dweight || dweight->numel() == OC * C) && (!dbias || dbias->numel() == OC),
                 "matmul_backward: dout {} inp {} weight {}", dout.str(), inp.str(), weight.str());
    TRIPOD_CPU_DISPATCH(inp.dtype(),
        cpu::matmul_backward<T>(dinp ? dinp->data<T>() : nullptr, dweight ? dweight->data<T>() : nullptr,
                                dbias ? dbias->data<T>() : nullptr, dout.data<T>(), inp.data<T>(),
                                weight.data<T>(), N, C, OC));
  }

  void gelu_forward(Tensor& out, const Tensor& inp) override {
    TRIPOD_CHECK(out.numel() == inp.numel(), "gelu_forward: {} vs {}", out.str(), inp.str());
    TRIPOD_CPU_DISPATCH(inp.dtype(), cpu::gelu_forward<T>(out.data<T>(), inp.data<T>(), inp.numel()));
  }
  void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) override {
    TRIPOD_CHECK(dinp.numel() == inp.numel() && dout.numel() == inp.numel(), "gelu_backward: sizes");
    TRIPOD_CPU_DISPATCH(inp.dtype(), cpu::gelu_backward<T>(dinp.data<T>(), inp.data<T>(), dout.data<T>(), inp.numel()));
  }

  void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int n_head) override {
    const int64_t B = qkv.size(0), Tn = qkv.size(1), C = qkv.size(2) / 3;
    TRIPOD_CHECK(qkv.dim() == 3 && qkv.size(2) % 3 == 0 && n_head > 0 && C % n_head == 0,
                 "attention_forward: qkv {} with {} heads", qkv.str(), n_head);
    check_shape(out, {B, Tn, C}, "attention_forward out");
    check_stat(lse, qkv.dtype(), B * n_head * Tn, "attention_forward lse");
    TRIPOD_CPU_DISPATCH(qkv.dtype(), cpu::attention_forward<T>(out.data<T>(), lse.data<cpu::stat_t<T>>(),
                                                               qkv.data<T>(), B, Tn, C, n_head));
  }
  void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                          const Tensor& lse, int n_head) override {
    const int64_t B = qkv.size(0), Tn = qkv.size(1), C = qkv.size(2) / 3;
    TRIPOD_CHECK(dqkv.numel() == qkv.numel() && dout.numel() == out.numel(), "attention_backward: shapes");
    TRIPOD_CPU_DISPATCH(qkv.dtype(),
        cpu::attention_backward<T>(dqkv.data<T>(), dout.data<T>(), qkv.data<T>(), out.data<T>(),
                                   lse.data<cpu::stat_t<T>>(), B, Tn, C, n_head));
  }

  void dropout_forward(Tensor& out, const Tensor& inp, float p, uint64_t seed,
                       uint64_t offset) override {
    TRIPOD_CHECK(p >= 0.f && p < 1.f, "dropout probability {} outside [0, 1)", p);
    TRIPOD_CPU_DISPATCH(inp.dtype(), cpu::dropout<T>(out.data<T>(), inp.data<T>(), inp.numel(), p, seed, offset));
  }
  void dropout_backward(Tensor& dinp, const Tensor& dout, float p, uint64_t seed,
                        uint64_t offset) override {
    // The same mask and scale apply to the gradient.
    TRIPOD_CPU_DISPATCH(dout.dtype(), cpu::dropout<T>(dinp.data<T>(), dout.data<T>(), dout.numel(), p, seed, offset));
  }

  void ce_row_max(Tensor& row_max, const Tensor& logits) override {
    check_stat(row_max, logits.dtype(), rows(logits), "ce_row_max");
    TRIPOD_CPU_DISPATCH(logits.dtype(), cpu::ce_row_max<T>(row_max.data<cpu::stat_t<T>>(), logits.data<T>(),
                                                           rows(logits), logits.size(-1)));
  }
  void ce_row_sums(Tensor& sums, const Tensor& logits, const Tensor& row_max,
                   const Tensor& targets, int64_t vocab_start) override {
    const int64_t N = rows(logits);
    check_stat(sums, logits.dtype(), 2 * N, "ce_row_sums");
    TRIPOD_CHECK(targets.numel() == N, "ce_row_sums: {} targets for {} rows", targets.numel(), N);
    TRIPOD_CPU_DISPATCH(logits.dtype(),
        cpu::ce_row_sums<T>(sums.data<cpu::stat_t<T>>(), logits.data<T>(), row_max.data<cpu::stat_t<T>>(),
                            targets.data<int32_t>(), N, logits.size(-1), vocab_start));
  }
  void ce_loss(Tensor& losses, const Tensor& sums, const Tensor& row_max) override;
  void ce_backward(Tensor& dlogits, const Tensor& logits, const Tensor& row_max, const Tensor& sums,
                   const Tensor& targets, int64_t vocab_start, float dloss) override {
    TRIPOD_CPU_DISPATCH(logits.dtype(),
        cpu::ce_backward<T>(dlogits.data<T>(), logits.data<T>(), row_max.data<cpu::stat_t<T>>(),
                            sums.data<cpu::stat_t<T>>(), targets.data<int32_t>(), rows(logits),
                            logits.size(-1), vocab_start, dloss));
  }

  void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                    const AdamWStep& s) override {
    TRIPOD_CHECK(param.numel() == grad.numel() && m.numel() == param.numel() && v.numel() == param.numel(),
                 "adamw_update: sizes {} {} {} {}", param.str(), grad.str(), m.str(), v.str());
    TRIPOD_CPU_DISPATCH(param.dtype(),
        cpu::adamw_update<T>(param.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>(), param.numel(),
                             s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.step, s.grad_scale));
  }
  void sum_squares(Tensor& acc, const Tensor& x) override {
    double s = 0;
    TRIPOD_CPU_DISPATCH(x.dtype(), s = cpu::sum_squares<T>(x.data<T>(), x.numel()));
    TRIPOD_CPU_DISPATCH(acc.dtype(), acc.data<T>()[0] += static_cast<T>(s));
  }
};

void CpuBackend::cast(Tensor& dst, const Tensor& src) {
  TRIPOD_CHECK(dst.numel() == src.numel(), "cast: {} <- {}", dst.str(), src.str());
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

void CpuBackend::ce_loss(Tensor& losses, const Tensor& sums, const Tensor& row_max) {
  const int64_t N = row_max.numel();
  TRIPOD_CHECK(sums.numel() == 2 * N && losses.numel() == N, "ce_loss: shapes");
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
