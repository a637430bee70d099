// The CUDA backend (backend/cuda/cuda_backend.h): the _impls of
// backend/ops.h, each a call into the launchers of the <op>.cu files on the
// backend's stream. Arguments arrive checked (backend/ops.cpp); what is left
// here is launcher-specific (head sizes, dtypes a kernel lacks). Same op
// names and contracts as backend/cpu.
#include "backend/cuda/cuda_backend.h"

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <tuple>
#include <vector>

#include <cuda_profiler_api.h>

#include "base/error.h"

#include "backend/cuda/adamw.cuh"
#include "backend/cuda/allocator.cuh"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/cudnn_attention.cuh"
#include "backend/cuda/context_parallel.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_fp8_attention.h"
#include "backend/cuda/cross_entropy.cuh"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/embedding.cuh"
#include "backend/cuda/fp8.cuh"
#include "backend/cuda/grouped_matmul.cuh"
#include "backend/cuda/layernorm.cuh"
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/moe.cuh"
#include "backend/cuda/reduce.cuh"
#include "backend/cuda/rmsnorm.cuh"
#include "backend/cuda/rope.cuh"
#include "backend/cuda/swiglu.cuh"

namespace tripod::backend {
namespace cuda {

namespace {

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
    fp8_note_ = fp8_gemm_limitation(prop.major, prop.minor);
    caching_allocator();  // registers the CUDA allocator with tensor/
    TRIPOD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    blas_ = std::make_unique<BlasLt>();
    fp8_gemm_ = std::make_unique<Fp8Gemm>();
  }
  ~CudaBackend() override {
    if (stream_) cudaStreamSynchronize(stream_);
    scratch_ = Tensor();
    rope_tables_.clear();
    blas_.reset();
    fp8_gemm_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::cuda(device_); }
  std::string name() const override { return name_; }
  std::string fp8_gemm_note() const override { return fp8_note_; }
  std::string fp8_attention_note(int64_t hs) const override { return cudnn_fp8_attention_unserved(hs); }
  bool computes_in(DType d) const override { return d == DType::F32 || d == DType::BF16 || d == DType::F16; }
  void set_deterministic(bool on) override { deterministic_ = on; }
  bool profiler_start() override {
    TRIPOD_CUDA_CHECK(cudaProfilerStart());
    return true;
  }
  void profiler_stop() override { TRIPOD_CUDA_CHECK(cudaProfilerStop()); }

  // ---- memory ----
  Tensor empty(const Shape& shape, DType dtype) override {
    return Tensor::empty(shape, dtype, Device::cuda(device_));
  }
  void zero(Tensor& t) override {
    if (t.nbytes()) TRIPOD_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream_));
  }
  void copy_impl(Tensor& dst, const Tensor& src) override {
    if (!dst.nbytes()) return;
    if (dst.is_cpu() && src.is_cpu()) {
      TRIPOD_CUDA_CHECK(cudaStreamSynchronize(stream_));
      std::memcpy(dst.raw(), src.raw(), dst.nbytes());
      return;
    }
    TRIPOD_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), dst.nbytes(), cudaMemcpyDefault, stream_));
  }
  void cast_impl(Tensor& dst, const Tensor& src) override {
    cuda::cast(dst.raw(), dst.dtype(), src.raw(), src.dtype(), src.numel(), stream_);
  }
  void synchronize() override { TRIPOD_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  size_t peak_memory_bytes() const override { return caching_allocator().peak_bytes(); }
  void* native_stream() const override { return stream_; }

  // ---- elementwise ----
  void add_impl(Tensor& out, const Tensor& a, const Tensor& b) override {
    cuda::add(out.raw(), a.raw(), b.raw(), out.numel(), out.dtype(), stream_);
  }
  void scale_impl(Tensor& t, float s) override {
    cuda::scale(t.raw(), s, t.numel(), t.dtype(), stream_);
  }
  void add_bias_impl(Tensor& out, const Tensor& bias) override {
    int64_t OC = bias.numel();
    cuda::add_bias(out.raw(), bias.raw(), out.numel() / OC, OC, out.dtype(), stream_);
  }

  // ---- embedding ----
  void embedding_forward_impl(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor* wpe,
                              int64_t vocab_start) override {
    int64_t B = tokens.size(0), T = tokens.size(1), V_tp = wte.size(0), C = wte.size(1);
    cuda::embedding_forward(out.raw(), tokens.data<int32_t>(), wte.raw(), wpe ? wpe->raw() : nullptr,
                            B, T, C, V_tp, vocab_start, wte.dtype(), stream_);
  }
  void embedding_backward_impl(Tensor* dwte, Tensor* dwpe, const Tensor& dout, const Tensor& tokens,
                               int64_t vocab_start) override {
    int64_t B = tokens.size(0), T = tokens.size(1), C = dout.size(-1);
    const Tensor* g = dwte ? dwte : dwpe;
    if (!g) return;
    int64_t V_tp = dwte ? dwte->size(0) : 0;
    cuda::embedding_backward(dwte ? dwte->raw() : nullptr, dwpe ? dwpe->raw() : nullptr,
                             g->dtype(), dout.raw(), tokens.data<int32_t>(), B, T, C, V_tp,
                             vocab_start, dout.dtype(), stream_, deterministic_);
  }

  // ---- layernorm ----
  void layernorm_forward_impl(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                              const Tensor& weight, const Tensor& bias, float eps) override {
    int64_t C = weight.numel(), N = inp.numel() / C;
    cuda::layernorm_forward(out.raw(), mean.data<float>(), rstd.data<float>(), inp.raw(),
                            weight.raw(), bias.raw(), weight.dtype(), eps, N, C, inp.dtype(), stream_);
  }
  void layernorm_backward_impl(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                               const Tensor& inp, const Tensor& weight, const Tensor& mean,
                               const Tensor& rstd, Tensor* out, const Tensor* bias) override {
    int64_t C = weight.numel(), N = inp.numel() / C;
    float* scratch = scratch_floats(2 * size_t(cuda::layernorm_backward_blocks(N)) * C);
    cuda::layernorm_backward(dinp.raw(), dweight.raw(), dbias.raw(), dweight.dtype(), dout.raw(),
                             inp.raw(), weight.raw(), weight.dtype(), mean.data<float>(), rstd.data<float>(), N, C,
                             inp.dtype(), scratch, stream_, out ? out->raw() : nullptr,
                             bias ? bias->raw() : nullptr);
  }
  void fused_residual_layernorm_forward_impl(Tensor& residual, Tensor& out, Tensor& mean, Tensor& rstd,
                                             const Tensor& a, const Tensor& b, const Tensor& weight,
                                             const Tensor& bias, float eps) override {
    int64_t C = weight.numel(), N = a.numel() / C;
    cuda::fused_residual_layernorm_forward(residual.raw(), out.raw(), mean.data<float>(), rstd.data<float>(),
                                           a.raw(), b.raw(), weight.raw(), bias.raw(), weight.dtype(), eps,
                                           N, C, a.dtype(), stream_);
  }

  // ---- matmul ----
  void matmul_forward_impl(Tensor& out, const Tensor& inp, const Tensor& weight,
                           const Tensor* bias) override {
    int64_t OC = weight.size(0), C = weight.size(1), N = inp.numel() / C;
    cuda::matmul_forward(*blas_, out.raw(), inp.raw(), weight.raw(), bias ? bias->raw() : nullptr,
                         N, C, OC, inp.dtype(), stream_);
  }
  void matmul_backward_impl(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                            const Tensor& inp, const Tensor& weight) override {
    int64_t OC = weight.size(0), C = weight.size(1), N = inp.numel() / C;
    // The bias gradient rides in the weight gradient's GEMM (BGRADB) into
    // scratch, then adds into dbias (gradients accumulate); else its own pass.
    float* bgrad = (dbias && dweight && dbias->dtype() == DType::F32) ? scratch_floats(size_t(OC)) : nullptr;
    bool bias_done = false;
    if (dinp || dweight)
      bias_done = cuda::matmul_backward(*blas_, dinp ? dinp->raw() : nullptr, dweight ? dweight->raw() : nullptr,
                                        dweight ? dweight->dtype() : DType::F32, dout.raw(), inp.raw(),
                                        weight.raw(), N, C, OC, inp.dtype(), stream_, bgrad);
    if (bias_done) {
      cuda::add(dbias->raw(), dbias->raw(), bgrad, OC, DType::F32, stream_);
    } else if (dbias) {
      float* scratch = scratch_floats(size_t(cuda::colsum_chunks(N)) * OC);
      cuda::bias_backward(dbias->raw(), dbias->dtype(), dout.raw(), dout.dtype(), N, OC, scratch,
                          stream_);
    }
  }

  // ---- grouped matmul: one cuBLAS launch for all groups (NOTE [Grouped
  // expert GEMMs]); the default loop where cuBLAS refuses ----
  void grouped_matmul_forward_impl(Tensor& out, const Tensor& inp, const std::vector<const Tensor*>& weights,
                                   const std::vector<int64_t>& rows) override {
    const int64_t OC = out.size(1), C = inp.size(1);
    if (!grouped(true, OC, C, C, C, OC, out, inp, weights, rows, C, OC))
      Backend::grouped_matmul_forward_impl(out, inp, weights, rows);
  }
  void grouped_matmul_backward_data_impl(Tensor& dinp, const Tensor& dout, const std::vector<const Tensor*>& weights,
                                         const std::vector<int64_t>& rows) override {
    const int64_t C = dinp.size(1), OC = dout.size(1);
    if (!grouped(false, C, OC, C, OC, C, dinp, dout, weights, rows, OC, C))
      Backend::grouped_matmul_backward_data_impl(dinp, dout, weights, rows);
  }
  // d's rows (width d_w) from b's rows (width b_w) per group with weight A (GroupedGemm::run_groups).
  bool grouped(bool trans_a, int64_t m, int64_t k, int64_t lda, int64_t ldb, int64_t ldd, Tensor& d, const Tensor& b,
               const std::vector<const Tensor*>& weights, const std::vector<int64_t>& rows, int64_t b_w, int64_t d_w) {
    if (!grouped_) grouped_ = std::make_unique<cuda::GroupedGemm>();
    return grouped_->run_groups(trans_a, m, k, lda, ldb, ldd, d, b, weights, rows, b_w, d_w, device_, stream_);
  }

  // bf16/f16 through the cuBLASLt GELU epilogues; f32 (and widths or
  // pointers the epilogue's auxiliary matrix cannot take: leading dimension
  // a multiple of 8, 16-byte aligned) through the composed path of ops.cpp,
  // so f32 results stay those of matmul + gelu.
  void matmul_forward_gelu_impl(Tensor& out, Tensor& pre, const Tensor& inp, const Tensor& weight,
                                const Tensor* bias) override {
    int64_t OC = weight.size(0), C = weight.size(1), N = inp.numel() / C;
    if (inp.dtype() == DType::F32 || !epilogue_ok(OC, pre)) {
      Backend::matmul_forward_gelu_impl(out, pre, inp, weight, bias);
      return;
    }
    cuda::matmul_forward_gelu(*blas_, out.raw(), pre.raw(), inp.raw(), weight.raw(), bias ? bias->raw() : nullptr,
                              N, C, OC, inp.dtype(), stream_);
  }
  void matmul_backward_dgelu_impl(Tensor& dpre, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                                  const Tensor& inp, const Tensor& weight, const Tensor& pre) override {
    int64_t OC = weight.size(0), C = weight.size(1), N = inp.numel() / C;
    if (inp.dtype() == DType::F32 || !epilogue_ok(C, pre)) {
      Backend::matmul_backward_dgelu_impl(dpre, dweight, dbias, dout, inp, weight, pre);
      return;
    }
    cuda::matmul_backward_dgelu(*blas_, dpre.raw(), dout.raw(), weight.raw(), pre.raw(), N, C, OC,
                                inp.dtype(), stream_);
    matmul_backward_impl(nullptr, dweight, dbias, dout, inp, weight);
  }

  // ---- GELU ----
  void gelu_forward_impl(Tensor& out, const Tensor& inp) override {
    cuda::gelu_forward(out.raw(), inp.raw(), inp.numel(), inp.dtype(), stream_);
  }
  void gelu_backward_impl(Tensor& dinp, const Tensor& inp, const Tensor& dout) override {
    cuda::gelu_backward(dinp.raw(), inp.raw(), dout.raw(), inp.numel(), inp.dtype(), stream_);
  }

  // ---- attention ----
  void attention_forward_impl(Tensor& out, Tensor& lse, const Tensor& qkv, int n_head, int n_kv_head) override {
    int64_t B = qkv.size(0), T = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv_head);
    cuda::attention_forward(out.raw(), lse.data<float>(), qkv.raw(), B, T, n_head, n_kv_head,
                            static_cast<int>(HS), qkv.dtype(), stream_);
  }
  void attention_backward_impl(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                               const Tensor& lse, int n_head, int n_kv_head) override {
    int64_t B = qkv.size(0), T = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv_head);
    float* scratch = scratch_floats(size_t(B * n_head * T));
    cuda::attention_backward(dqkv.raw(), dout.raw(), qkv.raw(), out.raw(), lse.data<float>(), B, T, n_head,
                             n_kv_head, static_cast<int>(HS), qkv.dtype(), scratch, stream_, deterministic_);
  }

  // ---- FP8 attention (cuda_fp8_attention.cpp: cuDNN's FP8 flash attention) ----
  void attention_fp8_forward_impl(Tensor& out, Tensor& lse, const Tensor& qkv, const Fp8AttentionMeta& m,
                                  int n_head, int n_kv_head) override {
    fp8_attention_.forward(*this, stream_, out, lse, qkv, m, n_head, n_kv_head);
  }
  void attention_fp8_backward_impl(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                   const Tensor& lse, const Fp8AttentionMeta& m, int n_head, int n_kv_head) override {
    float* scratch = scratch_floats(size_t(qkv.size(0) * n_head * qkv.size(1)));
    fp8_attention_.backward(*this, stream_, scratch, dqkv, dout, qkv, out, lse, m, n_head, n_kv_head);
  }

  // ---- context parallelism: K/V copy and block attention (context_parallel.cu) ----
  void attention_kv_copy_impl(Tensor& dst, const Tensor& src, int n_head, int n_kv_head) override {
    const bool from_qkv = src.size(2) > dst.size(2);
    const Tensor& qkv = from_qkv ? src : dst;
    const int64_t B = qkv.size(0), T = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv_head);
    cuda::attention_kv_copy(dst.raw(), src.raw(), B, T, n_head, n_kv_head, static_cast<int>(HS), from_qkv,
                            src.dtype(), stream_);
  }
  void gather_rows_impl(Tensor& out, const Tensor& inp, const Tensor& index) override {
    const int64_t row_bytes = inp.size(1) * static_cast<int64_t>(dtype_size(inp.dtype()));
    TRIPOD_CHECK(row_bytes % 2 == 0, "gather_rows: rows of {} bytes (inp {}) are not whole 2-byte words", row_bytes,
                 inp.str());
    cuda::gather_rows(out.raw(), inp.raw(), index.data<int32_t>(), out.size(0), row_bytes, stream_);
  }
  void attention_block_forward_impl(Tensor& out, Tensor& lse, const Tensor& qkv, const Tensor& kv, int n_head,
                                    int n_kv_head, const AttentionBlock& blk, bool accumulate) override {
    const int64_t B = qkv.size(0), Tq = qkv.size(1), HS = block_head_size(qkv, n_head, n_kv_head);
    cuda::attention_block_forward(out.raw(), lse.data<float>(), qkv.raw(), kv.raw(), B, Tq, kv.size(1), n_head,
                                  n_kv_head, static_cast<int>(HS), window(blk), accumulate, qkv.dtype(), stream_);
  }
  void attention_block_backward_impl(Tensor& dqkv, Tensor& dkv, const Tensor& dout, const Tensor& qkv,
                                     const Tensor& kv, const Tensor& out, const Tensor& lse, int n_head,
                                     int n_kv_head, const AttentionBlock& blk) override {
    const int64_t B = qkv.size(0), Tq = qkv.size(1), HS = block_head_size(qkv, n_head, n_kv_head);
    float* scratch = scratch_floats(size_t(B * n_head * blk.q_len));
    cuda::attention_block_backward(dqkv.raw(), dkv.raw(), dout.raw(), qkv.raw(), kv.raw(), out.raw(),
                                   lse.data<float>(), B, Tq, kv.size(1), n_head, n_kv_head, static_cast<int>(HS),
                                   window(blk), scratch, qkv.dtype(), stream_, deterministic_);
  }
  static cuda::BlockWindow window(const AttentionBlock& b) {
    return {b.q_start, b.q_len, b.kv_start, b.kv_len, b.causal};
  }
  static int64_t block_head_size(const Tensor& qkv, int n_head, int n_kv_head) {
    const int64_t HS = qkv.size(2) / (n_head + 2 * n_kv_head);
    TRIPOD_CHECK_HINT(HS <= cuda::kBlockMaxHS, "use a head size of at most 256 with --context-parallel-size > 1",
                      "block attention: head size {} is above the {} the CUDA kernels take", HS,
                      cuda::kBlockMaxHS);
    return HS;
  }

  // ---- RMSNorm ----
  void rmsnorm_forward_impl(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                            float eps) override {
    int64_t C = weight.numel(), N = inp.numel() / C;
    cuda::rmsnorm_forward(out.raw(), rstd.data<float>(), inp.raw(), weight.raw(), weight.dtype(), eps, N, C,
                          inp.dtype(), stream_);
  }
  void rmsnorm_backward_impl(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                             const Tensor& weight, const Tensor& rstd) override {
    int64_t C = weight.numel(), N = inp.numel() / C;
    float* scratch = scratch_floats(size_t(cuda::rmsnorm_backward_blocks(N)) * C);
    cuda::rmsnorm_backward(dinp.raw(), dweight.raw(), dweight.dtype(), dout.raw(), inp.raw(), weight.raw(),
                           weight.dtype(), rstd.data<float>(), N, C, inp.dtype(), scratch, stream_);
  }
  void fused_residual_rmsnorm_forward_impl(Tensor& residual, Tensor& out, Tensor& rstd, const Tensor& a,
                                           const Tensor& b, const Tensor& weight, float eps) override {
    int64_t C = weight.numel(), N = a.numel() / C;
    cuda::fused_residual_rmsnorm_forward(residual.raw(), out.raw(), rstd.data<float>(), a.raw(), b.raw(),
                                         weight.raw(), weight.dtype(), eps, N, C, a.dtype(), stream_);
  }

  // ---- rotary position embedding ----
  void rope_impl(Tensor& qkv, int n_head, int n_kv_head, int64_t rot_dim, float base, bool backward) override {
    int64_t B = qkv.size(0), T = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv_head);
    const Tensor& table = rope_table(T, rot_dim, base);
    cuda::rope(qkv.raw(), table.data<float>(), table.size(1), B, T, n_head, n_kv_head, static_cast<int>(HS),
               static_cast<int>(rot_dim), backward, qkv.dtype(), stream_);
  }

  // RoPE at positions: a (cos, sin) table for this call's rows (in the
  // scratch), then the same rotation kernel.
  void rope_positions_impl(Tensor& qkv, int n_head, int n_kv_head, int64_t rot_dim, float base, bool backward,
                           const Tensor& positions) override {
    const int64_t B = qkv.size(0), T = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv_head);
    float* table = scratch_floats(size_t(T * rot_dim));
    cuda::rope_positions_table(table, positions.data<int32_t>(), T, static_cast<int>(rot_dim), base, stream_);
    cuda::rope(qkv.raw(), table, T, B, T, n_head, n_kv_head, static_cast<int>(HS), static_cast<int>(rot_dim),
               backward, qkv.dtype(), stream_);
  }

  // ---- SwiGLU ----
  void swiglu_forward_impl(Tensor& out, const Tensor& inp) override {
    int64_t F = out.size(-1), N = out.numel() / F;
    cuda::swiglu_forward(out.raw(), inp.raw(), N, F, inp.dtype(), stream_);
  }
  void swiglu_backward_impl(Tensor& dinp, const Tensor& inp, const Tensor& dout) override {
    int64_t F = dout.size(-1), N = dout.numel() / F;
    cuda::swiglu_backward(dinp.raw(), inp.raw(), dout.raw(), N, F, inp.dtype(), stream_);
  }

  // ---- dropout ----
  void dropout_forward_impl(Tensor& out, const Tensor& inp, float p, uint64_t seed,
                            uint64_t offset) override {
    cuda::dropout_forward(out.raw(), inp.raw(), inp.numel(), p, seed, offset, inp.dtype(), stream_);
  }
  void dropout_backward_impl(Tensor& dinp, const Tensor& dout, float p, uint64_t seed,
                             uint64_t offset) override {
    // Same mask, same scale: the backward is the forward applied to dout.
    dropout_forward_impl(dinp, dout, p, seed, offset);
  }

  // ---- cross entropy ----
  void ce_row_max_impl(Tensor& row_max, const Tensor& logits) override {
    int64_t V = logits.size(-1), N = logits.numel() / V;
    cuda::ce_row_max(row_max.data<float>(), logits.raw(), N, V, logits.dtype(), stream_);
  }
  void ce_row_sums_impl(Tensor& sums, const Tensor& logits, const Tensor& row_max,
                        const Tensor& targets, int64_t vocab_start) override {
    int64_t V = logits.size(-1), N = logits.numel() / V;
    cuda::ce_row_sums(sums.data<float>(), logits.raw(), row_max.data<float>(),
                      targets.data<int32_t>(), vocab_start, N, V, logits.dtype(), stream_);
  }
  void ce_loss_impl(Tensor& losses, const Tensor& sums, const Tensor& row_max) override {
    int64_t N = row_max.numel();
    cuda::ce_loss(losses.data<float>(), sums.data<float>(), row_max.data<float>(), N, stream_);
  }
  void ce_backward_impl(Tensor& dlogits, const Tensor& logits, const Tensor& row_max, const Tensor& sums,
                        const Tensor& targets, int64_t vocab_start, float dloss) override {
    int64_t V = logits.size(-1), N = logits.numel() / V;
    cuda::ce_backward(dlogits.raw(), logits.raw(), row_max.data<float>(), sums.data<float>(),
                      targets.data<int32_t>(), vocab_start, dloss, N, V, logits.dtype(), stream_);
  }

  void cross_entropy_fused_impl(Tensor& losses, Tensor* dlogits, const Tensor& logits, const Tensor& targets,
                                float dloss) override {
    int64_t V = logits.size(-1), N = logits.numel() / V;
    float* stats = scratch_floats(3 * size_t(N));  // row_max (N), sums (2, N): not returned
    cuda::ce_fused(losses.data<float>(), stats, stats + N, dlogits ? dlogits->raw() : nullptr, logits.raw(),
                   targets.data<int32_t>(), dloss, dlogits != nullptr, N, V, logits.dtype(), stream_);
  }

  // ---- optimizer ----
  void adamw_update_impl(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                         const AdamWStep& step) override {
    cuda::adamw_update(param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(),
                       param.numel(), adamw_args(step), stream_);
  }
  void adamw_update_cast_impl(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWStep& step,
                              Tensor& compute_out) override {
    if (compute_out.dtype() == DType::F32)  // an f32 "copy": the composed default
      return Backend::adamw_update_cast_impl(param, grad, m, v, step, compute_out);
    cuda::adamw_update_cast(param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(),
                            compute_out.raw(), compute_out.dtype(), param.numel(), adamw_args(step), stream_);
  }
  void sum_squares_impl(Tensor& acc, const Tensor& x) override {
    float* scratch = scratch_floats(cuda::kSumSquaresBlocks);
    cuda::sum_squares(acc.data<float>(), x.raw(), x.dtype(), x.numel(), scratch, stream_);
  }

  // ---- FP8 (fp8.cu; the GEMM through cuBLASLt in fp8_matmul.cpp) ----
  void fp8_cast_transpose_impl(Tensor& out, Tensor* out_t, Tensor& amax, const Tensor& in,
                               const Tensor& scale) override {
    const int64_t C = in.size(-1), R = C ? in.numel() / C : 0;
    cuda::fp8_cast_transpose(out.raw(), out_t ? out_t->raw() : nullptr, out.dtype(), amax.data<float>(), in.raw(),
                             in.dtype(), scale.data<float>(), R, C, stream_);
  }
  // The SwiGLU casts in one kernel where it takes the shape; else the
  // unfused default (swiglu into a temporary, then the cast).
  void fp8_swiglu_cast_transpose_impl(Tensor& out, Tensor& out_t, Tensor& amax, const Tensor& inp,
                                      const Tensor& scale) override {
    if (!cuda::fp8_swiglu_cast_transpose(out.raw(), out_t.raw(), out.dtype(), amax.data<float>(), inp.raw(), nullptr,
                                         inp.dtype(), scale.data<float>(), inp.size(0), inp.size(1) / 2, stream_))
      Backend::fp8_swiglu_cast_transpose_impl(out, out_t, amax, inp, scale);
  }
  void fp8_swiglu_backward_cast_transpose_impl(Tensor& out, Tensor& out_t, Tensor& amax, const Tensor& inp,
                                               const Tensor& dout, const Tensor& scale) override {
    if (!cuda::fp8_swiglu_cast_transpose(out.raw(), out_t.raw(), out.dtype(), amax.data<float>(), inp.raw(),
                                         dout.raw(), inp.dtype(), scale.data<float>(), inp.size(0), inp.size(1) / 2,
                                         stream_))
      Backend::fp8_swiglu_backward_cast_transpose_impl(out, out_t, amax, inp, dout, scale);
  }
  void fp8_dequantize_impl(Tensor& out, const Tensor& in, const Tensor& scale_inv) override {
    cuda::fp8_dequantize(out.raw(), out.dtype(), in.raw(), in.dtype(), scale_inv.data<float>(), out.numel(),
                         stream_);
  }
  // cuBLASLt where it takes the call, else the fallback kernel (Fp8Gemm::matmul).
  void fp8_matmul_impl(Tensor& out, const Tensor& a, const Tensor& a_scale_inv, const Tensor& b,
                       const Tensor& b_scale_inv, const Tensor* bias, bool accumulate, bool fast_accum) override {
    const int64_t K = b.size(1), OC = b.size(0), N = OC ? out.numel() / OC : 0;
    fp8_gemm_->matmul(out.raw(), out.dtype(), a.raw(), a.dtype(), a_scale_inv.data<float>(), b.raw(), b.dtype(),
                      b_scale_inv.data<float>(), bias ? bias->raw() : nullptr, accumulate, N, K, OC, stream_, fast_accum);
  }
  // Block scaling (fp8_block.cu; the GEMM through cuBLASLt's block-scaled
  // modes in fp8_matmul.cpp, else the fallback kernel). Scales are f32.
  void fp8_block_cast_impl(Tensor& out, Tensor& scale_inv, Tensor* out_t, Tensor* scale_inv_t,
                           const Tensor& in) override {
    const int64_t C = in.size(-1), R = C ? in.numel() / C : 0;
    cuda::fp8_block_cast(out.raw(), scale_inv.data<float>(), out_t ? out_t->raw() : nullptr,
                         scale_inv_t ? scale_inv_t->data<float>() : nullptr, out.dtype(), in.raw(), in.dtype(), R, C,
                         stream_);
  }
  void fp8_block_cast_tiles_impl(Tensor& out, Tensor& out_t, Tensor& scale_inv, Tensor& scale_inv_t,
                                 const Tensor& in) override {
    cuda::fp8_block_cast_tiles(out.raw(), out_t.raw(), scale_inv.data<float>(), scale_inv_t.data<float>(),
                               out.dtype(), in.raw(), in.dtype(), in.size(0), in.size(1), stream_);
  }
  void fp8_swiglu_block_cast_impl(Tensor& out, Tensor& scale_inv, Tensor& out_t, Tensor& scale_inv_t, const Tensor& inp,
                                  const Tensor* dout) override {
    if (!cuda::fp8_swiglu_block_cast(out.raw(), scale_inv.data<float>(), out_t.raw(), scale_inv_t.data<float>(),
                                     out.dtype(), inp.raw(), dout ? dout->raw() : nullptr, inp.dtype(), inp.size(0),
                                     inp.size(1) / 2, stream_))
      Backend::fp8_swiglu_block_cast_impl(out, scale_inv, out_t, scale_inv_t, inp, dout);
  }
  void fp8_block_matmul_impl(Tensor& out, const Tensor& a, const Tensor& a_scale_inv, const Tensor& b,
                             const Tensor& b_scale_inv, bool b_tiles, const Tensor* bias, bool accumulate) override {
    const int64_t K = b.size(1), OC = b.size(0), N = OC ? out.numel() / OC : 0;
    fp8_gemm_->matmul_block(out.raw(), out.dtype(), a.raw(), a.dtype(), a_scale_inv.data<float>(), b.raw(), b.dtype(),
                            b_scale_inv.data<float>(), b_tiles, bias ? bias->raw() : nullptr, accumulate, N, K, OC,
                            stream_);
  }
  void fp8_update_scale_impl(Tensor& scale, Tensor& scale_inv, Tensor* amax_history, const Tensor& amax,
                             float fp8_max, int margin, bool use_max) override {
    cuda::fp8_update_scale(scale.data<float>(), scale_inv.data<float>(),
                           amax_history ? amax_history->data<float>() : nullptr, amax.data<float>(), amax.numel(),
                           amax_history ? amax_history->size(1) : 0, fp8_max, margin, use_max, stream_);
  }

  // ---- mixture of experts (moe_router.cu, moe.cu); router tensors f32 ----
  void moe_router_topk_impl(Tensor& probs, Tensor& indices, const Tensor& logits, const Tensor* bias,
                            const MoeRouting& r) override {
    cuda::moe_router_topk(probs.data<float>(), indices.data<int32_t>(), logits.data<float>(),
                          bias ? bias->data<float>() : nullptr, logits.size(0), logits.size(1), r.topk, r.sigmoid,
                          r.pre_softmax, r.scaling_factor, stream_);
  }
  void moe_router_topk_backward_impl(Tensor& dlogits, const Tensor& dprobs, const Tensor& logits,
                                     const Tensor& indices, const MoeRouting& r) override {
    cuda::moe_router_topk_backward(dlogits.data<float>(), dprobs.data<float>(), logits.data<float>(),
                                   indices.data<int32_t>(), logits.size(0), logits.size(1), r.topk, r.sigmoid,
                                   r.pre_softmax, r.scaling_factor, stream_);
  }
  void moe_aux_loss_impl(Tensor* dlogits, Tensor& losses, const Tensor& logits, const MoeAuxLoss& a) override {
    const int64_t N = logits.size(0), E = logits.size(1);
    Tensor scratch = empty({std::max<int64_t>(cuda::moe_aux_loss_scratch(N, E, a.topk, a.seq_length), 1)},
                           DType::F64);
    cuda::moe_aux_loss(dlogits ? dlogits->data<float>() : nullptr, losses.data<float>(), logits.data<float>(), N, E,
                       a.topk, a.sigmoid, a.seq_length, a.aux_coeff, a.z_coeff, a.grad_scale,
                       scratch.data<double>(), stream_);
  }
  void moe_permute_map_impl(Tensor& row_map, Tensor& counts, const Tensor& indices, const Tensor& probs, int64_t E,
                            int64_t capacity, bool drop_by_probs) override {
    Tensor raw = empty({E}, DType::I32);
    cuda::moe_permute_map(row_map.data<int32_t>(), counts.data<int32_t>(), indices.data<int32_t>(),
                          probs.data<float>(), indices.numel(), E, capacity, drop_by_probs, raw.data<int32_t>(),
                          stream_);
  }
  void moe_permute_impl(Tensor& out, const Tensor& inp, const Tensor& row_map, int k) override {
    cuda::moe_permute(out.raw(), inp.raw(), row_map.data<int32_t>(), out.size(0), out.size(1), k, out.dtype(),
                      stream_);
  }
  void moe_permute_backward_impl(Tensor& dinp, const Tensor& dout, const Tensor& row_map, int k) override {
    Tensor inverse = empty({std::max<int64_t>(dinp.size(0) * k, 1)}, DType::I32);
    cuda::moe_unpermute(dinp.raw(), dout.raw(), row_map.data<int32_t>(), nullptr, dinp.size(0), dout.size(0),
                        dinp.size(1), k, inverse.data<int32_t>(), dinp.dtype(), stream_);
  }
  void moe_unpermute_impl(Tensor& out, const Tensor& inp, const Tensor& row_map, const Tensor& probs) override {
    const int k = static_cast<int>(probs.size(1));
    Tensor inverse = empty({std::max<int64_t>(out.size(0) * k, 1)}, DType::I32);
    cuda::moe_unpermute(out.raw(), inp.raw(), row_map.data<int32_t>(), probs.data<float>(), out.size(0),
                        inp.size(0), out.size(1), k, inverse.data<int32_t>(), out.dtype(), stream_);
  }
  void moe_unpermute_backward_impl(Tensor& dinp, Tensor& dprobs, const Tensor& dout, const Tensor& inp,
                                   const Tensor& row_map, const Tensor& probs) override {
    cuda::moe_unpermute_backward(dinp.raw(), dprobs.data<float>(), dout.raw(), inp.raw(), row_map.data<int32_t>(),
                                 probs.data<float>(), dout.size(0), inp.size(0), dout.size(1),
                                 static_cast<int>(probs.size(1)), dout.dtype(), stream_);
  }

 private:
  static cuda::AdamWArgs adamw_args(const AdamWStep& step) {
    return {step.lr, step.beta1, step.beta2, step.eps, step.weight_decay, step.grad_scale,
            static_cast<float>(1.0 - std::pow(double(step.beta1), double(step.step))),
            static_cast<float>(1.0 - std::pow(double(step.beta2), double(step.step)))};
  }
  // The cuBLASLt GELU epilogues' auxiliary matrix (pre): leading dimension
  // ld a multiple of 8 and a 16-byte aligned pointer.
  static bool epilogue_ok(int64_t ld, const Tensor& aux) {
    return ld % 8 == 0 && reinterpret_cast<uintptr_t>(aux.raw()) % 16 == 0;
  }

  // The RoPE (cos, sin) table for (rot_dim, base): f32 (2, rows, rot_dim/2),
  // built on the host (cuda::rope_table) and kept; rebuilt with more rows
  // when a longer sequence comes (rows rounded up to a multiple of 256).
  const Tensor& rope_table(int64_t T, int64_t rot_dim, float base) {
    Tensor& t = rope_tables_[{rot_dim, base}];
    if (!t.defined() || t.size(1) < T) {
      const int64_t rows = (T + 255) / 256 * 256;
      std::vector<float> host = cuda::rope_table(rows, rot_dim, base);
      Tensor fresh = empty({2, rows, rot_dim / 2}, DType::F32);
      TRIPOD_CUDA_CHECK(cudaMemcpyAsync(fresh.raw(), host.data(), host.size() * sizeof(float),
                                        cudaMemcpyHostToDevice, stream_));
      TRIPOD_CUDA_CHECK(cudaStreamSynchronize(stream_));  // host buffer goes out of scope
      t = fresh;  // the old table's memory returns to the stream-ordered allocator
    }
    return t;
  }

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
  std::unique_ptr<Fp8Gemm> fp8_gemm_;  // FP8 GEMMs: own cuBLASLt handle, workspace at first use
  std::unique_ptr<cuda::GroupedGemm> grouped_;  // cuBLAS handle for the grouped GEMMs, at first use
  Tensor scratch_;  // f32 (n)
  cuda::Fp8AttentionRunner fp8_attention_;  // its amax slots and grouped-query buffers
  std::map<std::tuple<int64_t, float>, Tensor> rope_tables_;
  bool deterministic_ = false;  // set_deterministic
  std::string fp8_note_;        // fp8_gemm_limitation of this device's compute capability
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
