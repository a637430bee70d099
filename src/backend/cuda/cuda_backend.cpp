// The CUDA backend (backend/cuda/cuda_backend.h): checks shapes and dtypes,
// then calls the launchers of the <op>.cu files on the backend's stream.
// Same op names and contracts as backend/cpu (backend/ops.h).
#include "backend/cuda/cuda_backend.h"

#include <cmath>
#include <algorithm>
#include <cstring>

#include "base/error.h"

#include "backend/cuda/adamw.cuh"
#include "backend/cuda/allocator.cuh"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cross_entropy.cuh"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/embedding.cuh"
#include "backend/cuda/layernorm.cuh"
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/reduce.cuh"

namespace tripod::backend {
namespace cuda {

namespace {

bool is_act(DType d) { return d == DType::F32 || d == DType::BF16 || d == DType::F16; }

void check_act(const Tensor& t, const char* what) {
  TRIPOD_CHECK(t.defined() && is_act(t.dtype()), "{}: expected an f32, bf16 or f16 tensor, got {}",
               what, t.defined() ? t.str() : std::string("undefined"));
}
void check_dtype(const Tensor& t, DType d, const char* what) {
  TRIPOD_CHECK(t.defined() && t.dtype() == d, "{}: expected dtype {}, got {}", what,
               dtype_name(d), t.defined() ? t.str() : std::string("undefined"));
}
void check_numel(const Tensor& t, int64_t n, const char* what) {
  TRIPOD_CHECK(t.numel() == n, "{}: expected {} elements, got {}", what, n, t.str());
}
// Parameter gradients: f32 (fp32 accumulation) or the activation dtype.
void check_grad(const Tensor& g, DType act, const char* what) {
  TRIPOD_CHECK(g.dtype() == DType::F32 || g.dtype() == act,
               "{}: gradient must be f32 or {}, got {}", what, dtype_name(act), g.str());
}

// LayerNorm weight and bias: the activation dtype, or f32 (Megatron-style
// bf16/fp16 training keeps LayerNorm params in fp32 for compute, see
// model/param_table.h), both the same.
void check_ln_weight(const Tensor& w, const Tensor& b, DType act) {
  TRIPOD_CHECK(w.defined() && (w.dtype() == act || w.dtype() == DType::F32) && b.defined() && b.dtype() == w.dtype(),
               "layernorm weight/bias: expected dtype {} or f32 (both the same), got {} and {}", dtype_name(act),
               w.defined() ? w.str() : std::string("undefined"), b.defined() ? b.str() : std::string("undefined"));
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    int n = cuda_device_count();
    TRIPOD_CHECK_HINT(device >= 0 && device < n, "pick a device below the count, or run on CPU",
                      "CUDA device {} requested but {} device(s) are visible", device, n);
    TRIPOD_CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop{};
    TRIPOD_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    name_ = fmt::format("cuda:{} ({})", device, prop.name);
    caching_allocator();  // registers the CUDA allocator with tensor/
    TRIPOD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    blas_ = std::make_unique<BlasLt>();
  }
  ~CudaBackend() override {
    if (stream_) cudaStreamSynchronize(stream_);
    scratch_ = Tensor();
    blas_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::cuda(device_); }
  std::string name() const override { return name_; }

  // ---- memory ----
  Tensor empty(const Shape& shape, DType dtype) override {
    return Tensor::empty(shape, dtype, Device::cuda(device_));
  }
  void zero(Tensor& t) override {
    if (t.nbytes()) TRIPOD_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream_));
  }
  void copy(Tensor& dst, const Tensor& src) override {
    TRIPOD_CHECK(dst.numel() == src.numel() && dst.dtype() == src.dtype(),
                 "copy: {} and {} differ in size or dtype", dst.str(), src.str());
    if (!dst.nbytes()) return;
    if (dst.is_cpu() && src.is_cpu()) {
      TRIPOD_CUDA_CHECK(cudaStreamSynchronize(stream_));
      std::memcpy(dst.raw(), src.raw(), dst.nbytes());
      return;
    }
    TRIPOD_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), dst.nbytes(), cudaMemcpyDefault, stream_));
  }
  void cast(Tensor& dst, const Tensor& src) override {
    check_act(dst, "cast dst");
    check_act(src, "cast src");
    check_numel(dst, src.numel(), "cast dst");
    cuda::cast(dst.raw(), dst.dtype(), src.raw(), src.dtype(), src.numel(), stream_);
  }
  void synchronize() override { TRIPOD_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  size_t peak_memory_bytes() const override { return caching_allocator().peak_bytes(); }
  void* native_stream() const override { return stream_; }

  // ---- elementwise ----
  void add(Tensor& out, const Tensor& a, const Tensor& b) override {
    check_act(out, "add out");
    check_dtype(a, out.dtype(), "add a");
    check_dtype(b, out.dtype(), "add b");
    check_numel(a, out.numel(), "add a");
    check_numel(b, out.numel(), "add b");
    cuda::add(out.raw(), a.raw(), b.raw(), out.numel(), out.dtype(), stream_);
  }
  void scale(Tensor& t, float s) override {
    check_act(t, "scale");
    cuda::scale(t.raw(), s, t.numel(), t.dtype(), stream_);
  }
  void add_bias(Tensor& out, const Tensor& bias) override {
    check_act(out, "add_bias out");
    check_dtype(bias, out.dtype(), "add_bias bias");
    int64_t OC = bias.numel();
    TRIPOD_CHECK(OC > 0 && out.numel() % OC == 0, "add_bias: {} is not (N, {})", out.str(), OC);
    cuda::add_bias(out.raw(), bias.raw(), out.numel() / OC, OC, out.dtype(), stream_);
  }

  // ---- embedding ----
  void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor* wpe,
                         int64_t vocab_start) override {
    check_dtype(tokens, DType::I32, "embedding tokens");
    TRIPOD_CHECK(tokens.dim() == 2, "embedding tokens: expected (B, T), got {}", tokens.str());
    check_act(wte, "embedding wte");
    int64_t B = tokens.size(0), T = tokens.size(1), V_tp = wte.size(0), C = wte.size(1);
    check_dtype(out, wte.dtype(), "embedding out");
    check_numel(out, B * T * C, "embedding out");
    if (wpe) {
      check_dtype(*wpe, wte.dtype(), "embedding wpe");
      TRIPOD_CHECK(wpe->size(1) == C && wpe->size(0) >= T, "embedding wpe {} too small for T={}",
                   wpe->str(), T);
    }
    cuda::embedding_forward(out.raw(), tokens.data<int32_t>(), wte.raw(), wpe ? wpe->raw() : nullptr,
                            B, T, C, V_tp, vocab_start, wte.dtype(), stream_);
  }
  void embedding_backward(Tensor* dwte, Tensor* dwpe, const Tensor& dout, const Tensor& tokens,
                          int64_t vocab_start) override {
    check_dtype(tokens, DType::I32, "embedding tokens");
    check_act(dout, "embedding dout");
    int64_t B = tokens.size(0), T = tokens.size(1), C = dout.size(-1);
    check_numel(dout, B * T * C, "embedding dout");
    if (dwte && dwpe)
      TRIPOD_CHECK(dwte->dtype() == dwpe->dtype(), "embedding: dwte {} and dwpe {} differ in dtype",
                   dwte->str(), dwpe->str());
    const Tensor* g = dwte ? dwte : dwpe;
    if (!g) return;
    check_grad(*g, dout.dtype(), "embedding grad");
    int64_t V_tp = dwte ? dwte->size(0) : 0;
    if (dwte) TRIPOD_CHECK(dwte->size(1) == C, "dwte {} width != {}", dwte->str(), C);
    if (dwpe) TRIPOD_CHECK(dwpe->size(1) == C && dwpe->size(0) >= T, "dwpe {} too small", dwpe->str());
    cuda::embedding_backward(dwte ? dwte->raw() : nullptr, dwpe ? dwpe->raw() : nullptr,
                             g->dtype(), dout.raw(), tokens.data<int32_t>(), B, T, C, V_tp,
                             vocab_start, dout.dtype(), stream_);
  }

  // ---- layernorm ----
  void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias, float eps) override {
    check_act(inp, "layernorm inp");
    int64_t C = weight.numel(), N = inp.numel() / C;
    check_dtype(out, inp.dtype(), "layernorm out");
    check_ln_weight(weight, bias, inp.dtype());
    check_numel(out, inp.numel(), "layernorm out");
    check_numel(bias, C, "layernorm bias");
    check_dtype(mean, DType::F32, "layernorm mean");
    check_dtype(rstd, DType::F32, "layernorm rstd");
    check_numel(mean, N, "layernorm mean");
    check_numel(rstd, N, "layernorm rstd");
    cuda::layernorm_forward(out.raw(), mean.data<float>(), rstd.data<float>(), inp.raw(),
                            weight.raw(), bias.raw(), weight.dtype(), eps, N, C, inp.dtype(), stream_);
  }
  void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                          const Tensor& inp, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd) override {
    check_act(inp, "layernorm inp");
    int64_t C = weight.numel(), N = inp.numel() / C;
    for (const Tensor* t : std::initializer_list<const Tensor*>{&dinp, &dout}) check_dtype(*t, inp.dtype(), "layernorm tensors");
    check_ln_weight(weight, weight, inp.dtype());
    check_grad(dweight, inp.dtype(), "layernorm dweight");
    check_dtype(dbias, dweight.dtype(), "layernorm dbias");
    check_numel(dweight, C, "layernorm dweight");
    check_numel(dbias, C, "layernorm dbias");
    check_dtype(mean, DType::F32, "layernorm mean");
    check_dtype(rstd, DType::F32, "layernorm rstd");
    float* scratch = scratch_floats(2 * size_t(cuda::layernorm_backward_blocks(N)) * C);
    cuda::layernorm_backward(dinp.raw(), dweight.raw(), dbias.raw(), dweight.dtype(), dout.raw(),
                             inp.raw(), weight.raw(), weight.dtype(), mean.data<float>(), rstd.data<float>(), N, C,
                             inp.dtype(), scratch, stream_);
  }

  // ---- matmul ----
  void matmul_forward(Tensor& out, const Tensor& inp, const Tensor& weight,
                      const Tensor* bias) override {
    check_act(inp, "matmul inp");
    check_dtype(weight, inp.dtype(), "matmul weight");
    check_dtype(out, inp.dtype(), "matmul out");
    int64_t OC = weight.size(0), C = weight.size(1), N = inp.numel() / C;
    check_numel(inp, N * C, "matmul inp");
    check_numel(out, N * OC, "matmul out");
    if (bias) {
      check_dtype(*bias, inp.dtype(), "matmul bias");
      check_numel(*bias, OC, "matmul bias");
    }
    cuda::matmul_forward(*blas_, out.raw(), inp.raw(), weight.raw(), bias ? bias->raw() : nullptr,
                         N, C, OC, inp.dtype(), stream_);
  }
  void matmul_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& weight) override {
    check_act(inp, "matmul inp");
    check_dtype(weight, inp.dtype(), "matmul weight");
    check_dtype(dout, inp.dtype(), "matmul dout");
    int64_t OC = weight.size(0), C = weight.size(1), N = inp.numel() / C;
    check_numel(dout, N * OC, "matmul dout");
    if (dinp) {
      check_dtype(*dinp, inp.dtype(), "matmul dinp");
      check_numel(*dinp, N * C, "matmul dinp");
    }
    if (dweight) {
      check_grad(*dweight, inp.dtype(), "matmul dweight");
      check_numel(*dweight, OC * C, "matmul dweight");
    }
    if (dinp || dweight)
      cuda::matmul_backward(*blas_, dinp ? dinp->raw() : nullptr, dweight ? dweight->raw() : nullptr,
                            dweight ? dweight->dtype() : DType::F32, dout.raw(), inp.raw(),
                            weight.raw(), N, C, OC, inp.dtype(), stream_);
    if (dbias) {
      check_grad(*dbias, inp.dtype(), "matmul dbias");
      check_numel(*dbias, OC, "matmul dbias");
      float* scratch = scratch_floats(size_t(cuda::colsum_chunks(N)) * OC);
      cuda::bias_backward(dbias->raw(), dbias->dtype(), dout.raw(), dout.dtype(), N, OC, scratch,
                          stream_);
    }
  }

  // ---- GELU ----
  void gelu_forward(Tensor& out, const Tensor& inp) override {
    check_act(inp, "gelu inp");
    check_dtype(out, inp.dtype(), "gelu out");
    check_numel(out, inp.numel(), "gelu out");
    cuda::gelu_forward(out.raw(), inp.raw(), inp.numel(), inp.dtype(), stream_);
  }
  void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) override {
    check_act(inp, "gelu inp");
    check_dtype(dinp, inp.dtype(), "gelu dinp");
    check_dtype(dout, inp.dtype(), "gelu dout");
    check_numel(dinp, inp.numel(), "gelu dinp");
    check_numel(dout, inp.numel(), "gelu dout");
    cuda::gelu_backward(dinp.raw(), inp.raw(), dout.raw(), inp.numel(), inp.dtype(), stream_);
  }

  // ---- attention ----
  void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int n_head) override {
    check_act(qkv, "attention qkv");
    TRIPOD_CHECK(qkv.dim() == 3 && qkv.size(2) % 3 == 0, "attention qkv: expected (B, T, 3*C), got {}", qkv.str());
    int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
    TRIPOD_CHECK(n_head > 0 && C % n_head == 0, "attention: C={} not divisible by n_head={}", C, n_head);
    check_dtype(out, qkv.dtype(), "attention out");
    check_numel(out, B * T * C, "attention out");
    check_dtype(lse, DType::F32, "attention lse");
    check_numel(lse, B * n_head * T, "attention lse");
    cuda::attention_forward(out.raw(), lse.data<float>(), qkv.raw(), B, T, n_head,
                            static_cast<int>(C / n_head), qkv.dtype(), stream_);
  }
  void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                          const Tensor& lse, int n_head) override {
    check_act(qkv, "attention qkv");
    TRIPOD_CHECK(qkv.dim() == 3 && qkv.size(2) % 3 == 0, "attention qkv: expected (B, T, 3*C), got {}", qkv.str());
    int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
    TRIPOD_CHECK(n_head > 0 && C % n_head == 0, "attention: C={} not divisible by n_head={}", C, n_head);
    for (const Tensor* t : std::initializer_list<const Tensor*>{&dqkv, &dout, &out}) check_dtype(*t, qkv.dtype(), "attention tensors");
    check_numel(dqkv, qkv.numel(), "attention dqkv");
    check_numel(dout, B * T * C, "attention dout");
    check_numel(out, B * T * C, "attention out");
    check_dtype(lse, DType::F32, "attention lse");
    check_numel(lse, B * n_head * T, "attention lse");
    float* scratch = scratch_floats(size_t(B * n_head * T));
    cuda::attention_backward(dqkv.raw(), dout.raw(), qkv.raw(), out.raw(), lse.data<float>(), B, T,
                             n_head, static_cast<int>(C / n_head), qkv.dtype(), scratch, stream_);
  }

  // ---- dropout ----
  void dropout_forward(Tensor& out, const Tensor& inp, float p, uint64_t seed,
                       uint64_t offset) override {
    check_act(inp, "dropout inp");
    check_dtype(out, inp.dtype(), "dropout out");
    check_numel(out, inp.numel(), "dropout out");
    cuda::dropout_forward(out.raw(), inp.raw(), inp.numel(), p, seed, offset, inp.dtype(), stream_);
  }
  void dropout_backward(Tensor& dinp, const Tensor& dout, float p, uint64_t seed,
                        uint64_t offset) override {
    // Same mask, same scale: the backward is the forward applied to dout.
    dropout_forward(dinp, dout, p, seed, offset);
  }

  // ---- cross entropy ----
  void ce_row_max(Tensor& row_max, const Tensor& logits) override {
    check_act(logits, "ce logits");
    int64_t V = logits.size(-1), N = logits.numel() / V;
    check_dtype(row_max, DType::F32, "ce row_max");
    check_numel(row_max, N, "ce row_max");
    cuda::ce_row_max(row_max.data<float>(), logits.raw(), N, V, logits.dtype(), stream_);
  }
  void ce_row_sums(Tensor& sums, const Tensor& logits, const Tensor& row_max,
                   const Tensor& targets, int64_t vocab_start) override {
    check_act(logits, "ce logits");
    int64_t V = logits.size(-1), N = logits.numel() / V;
    check_dtype(sums, DType::F32, "ce sums");
    check_numel(sums, 2 * N, "ce sums");
    check_dtype(row_max, DType::F32, "ce row_max");
    check_numel(row_max, N, "ce row_max");
    check_dtype(targets, DType::I32, "ce targets");
    check_numel(targets, N, "ce targets");
    cuda::ce_row_sums(sums.data<float>(), logits.raw(), row_max.data<float>(),
                      targets.data<int32_t>(), vocab_start, N, V, logits.dtype(), stream_);
  }
  void ce_loss(Tensor& losses, const Tensor& sums, const Tensor& row_max) override {
    int64_t N = row_max.numel();
    check_dtype(losses, DType::F32, "ce losses");
    check_numel(losses, N, "ce losses");
    check_dtype(sums, DType::F32, "ce sums");
    check_numel(sums, 2 * N, "ce sums");
    check_dtype(row_max, DType::F32, "ce row_max");
    cuda::ce_loss(losses.data<float>(), sums.data<float>(), row_max.data<float>(), N, stream_);
  }
  void ce_backward(Tensor& dlogits, const Tensor& logits, const Tensor& row_max, const Tensor& sums,
                   const Tensor& targets, int64_t vocab_start, float dloss) override {
    check_act(logits, "ce logits");
    int64_t V = logits.size(-1), N = logits.numel() / V;
    check_dtype(dlogits, logits.dtype(), "ce dlogits");
    check_numel(dlogits, N * V, "ce dlogits");
    check_dtype(row_max, DType::F32, "ce row_max");
    check_numel(row_max, N, "ce row_max");
    check_dtype(sums, DType::F32, "ce sums");
    check_numel(sums, 2 * N, "ce sums");
    check_dtype(targets, DType::I32, "ce targets");
    check_numel(targets, N, "ce targets");
    cuda::ce_backward(dlogits.raw(), logits.raw(), row_max.data<float>(), sums.data<float>(),
                      targets.data<int32_t>(), vocab_start, dloss, N, V, logits.dtype(), stream_);
  }

  // ---- optimizer ----
  void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                    const AdamWStep& step) override {
    for (const Tensor* t : std::initializer_list<const Tensor*>{&param, &grad, &m, &v}) check_dtype(*t, DType::F32, "adamw tensors");
    for (const Tensor* t : std::initializer_list<const Tensor*>{&grad, &m, &v}) check_numel(*t, param.numel(), "adamw tensors");
    TRIPOD_CHECK(step.step >= 1, "adamw: step {} must be >= 1", step.step);
    cuda::AdamWArgs a{step.lr, step.beta1, step.beta2, step.eps, step.weight_decay, step.grad_scale,
                      static_cast<float>(1.0 - std::pow(double(step.beta1), double(step.step))),
                      static_cast<float>(1.0 - std::pow(double(step.beta2), double(step.step)))};
    cuda::adamw_update(param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(),
                       param.numel(), a, stream_);
  }
  void sum_squares(Tensor& acc, const Tensor& x) override {
    check_dtype(acc, DType::F32, "sum_squares acc");
    check_numel(acc, 1, "sum_squares acc");
    check_act(x, "sum_squares x");
    float* scratch = scratch_floats(cuda::kSumSquaresBlocks);
    cuda::sum_squares(acc.data<float>(), x.raw(), x.dtype(), x.numel(), scratch, stream_);
  }

 private:
  // Scratch for partial sums; reused across ops (all work is stream-ordered).
  float* scratch_floats(size_t n) {
    if (!scratch_.defined() || static_cast<size_t>(scratch_.numel()) < n)
      scratch_ = empty({static_cast<int64_t>(std::max<size_t>(n, 1 << 16))}, DType::F32);
    return scratch_.data<float>();
  }

  int device_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<BlasLt> blas_;
  Tensor scratch_;  // f32 (n)
};

}  // namespace
}  // namespace cuda

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver / no device: not an error here
    return 0;
  }
  return n;
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<cuda::CudaBackend>(device);
}

}  // namespace tripod::backend
