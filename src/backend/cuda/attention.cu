// Flash-style causal attention, forward and backward, in plain CUDA (f32 math
// on CUDA cores): the f32 path, and the fallback for bf16/f16 shapes the
// tensor-core kernels of attention_tc.cu do not take. See docs/cuda.md.
//
// NOTE [Attention tiling]
// Forward: one thread per query row; a block holds BQ = 64 query rows of one
// (b, h) and walks the key tiles up to the diagonal, staging K and V tiles in
// shared memory (every thread reads the same key: broadcast, no bank
// conflicts). Scores go through an online softmax in chunks of 16 keys
// (one rescale of the accumulator per chunk), in log2 units (exp2f).
// Backward (FlashAttention-2 split): D_i = dout_i . out_i first; then one
// kernel with a thread per key row accumulating dK, dV over the query tiles
// at and below the diagonal, and one with a thread per query row
// accumulating dQ over the key tiles up to the diagonal. No atomics, so the
// backward is deterministic. The thread-private rows (K, V in the dK/dV
// kernel; Q, dout in the dQ kernel) live transposed in shared memory,
// padded by one column, so a warp's reads are conflict-free; the
// accumulators stay in registers (HS floats each).
// Grid order: the longest tiles (most keys or queries) are scheduled first.
// Grouped-query attention (G K/V heads, NH % G == 0): qkv rows are
// [Q: NH heads | K: G | V: G] of width W = (NH + 2G) * HS; query head h reads
// K/V head h / (NH/G). The dK/dV kernel runs per K/V head and walks the
// query heads of its group in turn (their contributions summed in its
// registers, still without atomics); G == NH is multi-head attention.
#include "backend/cuda/attention.cuh"
#include "backend/cuda/attention_tc.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cudnn_attention.cuh"
#include "base/debug_config.h"

#include <string>

namespace tripod::backend::cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int HS> struct AttnTiles {
  static constexpr int kFwdQ = 64;                   // threads (query rows) per forward block
  static constexpr int kFwdK = HS <= 64 ? 64 : 32;   // keys per staged tile
  static constexpr int kBwdK = HS <= 64 ? 64 : 32;   // threads (key rows) per dK/dV block
  static constexpr int kBwdQ = HS <= 64 ? 32 : 16;   // queries per staged tile
  static constexpr int kDqQ = HS <= 64 ? 64 : 32;    // threads (query rows) per dQ block
  static constexpr int kDqK = HS <= 64 ? 32 : 16;    // keys per staged tile
};

// ---- kernels ----

template <typename T, int HS>
__global__ void __launch_bounds__(64) attention_forward_kernel(T* out, float* lse, const T* qkv,
                                                               int T_, int NH, int G, float scale) {
  constexpr int BQ = AttnTiles<HS>::kFwdQ, BK = AttnTiles<HS>::kFwdK, CH = 16;
  __shared__ float Ks[BK][HS], Vs[BK][HS];
  const int C = NH * HS, C3 = (NH + 2 * G) * HS;
  const int qt = gridDim.x - 1 - blockIdx.x;
  const int b = blockIdx.y / NH, h = blockIdx.y % NH, kvh = h / (NH / G);
  const int koff = C + kvh * HS, voff = C + (G + kvh) * HS;
  const int i = qt * BQ + threadIdx.x;
  const bool valid = i < T_;
  const T* base = qkv + int64_t(b) * T_ * C3;
  const float qscale = scale * kLog2e;
  float q[HS], o[HS];
#pragma unroll
  for (int d = 0; d < HS; ++d) {
    q[d] = valid ? to_f(base[int64_t(i) * C3 + h * HS + d]) * qscale : 0.f;
    o[d] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const int last_key = min(T_ - 1, qt * BQ + BQ - 1);
  for (int k0 = 0; k0 <= last_key; k0 += BK) {
    __syncthreads();
    for (int e = threadIdx.x; e < BK * HS; e += BQ) {
      int j = e / HS, d = e % HS, jg = k0 + j;
      bool in = jg < T_;
      Ks[j][d] = in ? to_f(base[int64_t(jg) * C3 + koff + d]) : 0.f;
      Vs[j][d] = in ? to_f(base[int64_t(jg) * C3 + voff + d]) : 0.f;
    }
    __syncthreads();
    if (!valid) continue;
    const int jmax = min(BK, i - k0 + 1);  // keys k0 + j <= i
    for (int j0 = 0; j0 < jmax; j0 += CH) {
      float s[CH], cmax = -INFINITY;
#pragma unroll
      for (int jj = 0; jj < CH; ++jj) {
        float acc = 0.f;
#pragma unroll
        for (int d = 0; d < HS; ++d) acc += q[d] * Ks[j0 + jj][d];
        s[jj] = j0 + jj < jmax ? acc : -INFINITY;
        cmax = fmaxf(cmax, s[jj]);
      }
      float mnew = fmaxf(m, cmax), corr = exp2f(m - mnew);
      l *= corr;
#pragma unroll
      for (int d = 0; d < HS; ++d) o[d] *= corr;
#pragma unroll
      for (int jj = 0; jj < CH; ++jj) {
        float p = exp2f(s[jj] - mnew);
        l += p;
#pragma unroll
        for (int d = 0; d < HS; ++d) o[d] += p * Vs[j0 + jj][d];
      }
      m = mnew;
    }
  }
  if (!valid) return;
  float inv = 1.f / l;
  T* y = out + (int64_t(b) * T_ + i) * C + h * HS;
#pragma unroll
  for (int d = 0; d < HS; ++d) y[d] = from_f<T>(o[d] * inv);
  lse[(int64_t(b) * NH + h) * T_ + i] = (m + log2f(l)) * kLn2;
}

// D(B, NH, T) = sum_d dout * out, one thread per (b, t, h).
template <typename T>
__global__ void attention_rowdot_backward_kernel(float* D, const T* dout, const T* out, int64_t B,
                                                 int T_, int NH, int HS) {
  int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // (b, t, h) order
  if (r >= B * T_ * NH) return;
  int h = r % NH;
  int64_t bt = r / NH;
  int t = bt % T_;
  int64_t b = bt / T_;
  const T* a = dout + r * HS;
  const T* o = out + r * HS;
  float s = 0.f;
  for (int d = 0; d < HS; ++d) s += to_f(a[d]) * to_f(o[d]);
  D[(b * NH + h) * T_ + t] = s;
}

template <typename T, int HS>
__global__ void attention_dkdv_backward_kernel(T* dqkv, const T* dout, const T* qkv,
                                               const float* lse, const float* D, int T_, int NH,
                                               int G, float scale) {
  constexpr int BK = AttnTiles<HS>::kBwdK, BQ = AttnTiles<HS>::kBwdQ;
  extern __shared__ float smem[];
  float* Kt = smem;                     // (HS, BK+1)
  float* Vt = Kt + HS * (BK + 1);       // (HS, BK+1)
  float* Qs = Vt + HS * (BK + 1);       // (BQ, HS)
  float* dOs = Qs + BQ * HS;            // (BQ, HS)
  float* Ls = dOs + BQ * HS;            // (BQ) lse in log2 units
  float* Ds = Ls + BQ;                  // (BQ)
  const int C = NH * HS, C3 = (NH + 2 * G) * HS, group = NH / G;
  const int k0 = blockIdx.x * BK;
  const int b = blockIdx.y / G, kvh = blockIdx.y % G;
  const int koff = C + kvh * HS, voff = C + (G + kvh) * HS;
  const int j = k0 + threadIdx.x;
  const T* base = qkv + int64_t(b) * T_ * C3;
  const T* dbase = dout + int64_t(b) * T_ * C;
  for (int e = threadIdx.x; e < BK * HS; e += BK) {
    int jj = e / HS, d = e % HS, jg = k0 + jj;
    bool in = jg < T_;
    Kt[d * (BK + 1) + jj] = in ? to_f(base[int64_t(jg) * C3 + koff + d]) : 0.f;
    Vt[d * (BK + 1) + jj] = in ? to_f(base[int64_t(jg) * C3 + voff + d]) : 0.f;
  }
  float dk[HS], dv[HS];
#pragma unroll
  for (int d = 0; d < HS; ++d) dk[d] = dv[d] = 0.f;
  const float sl2 = scale * kLog2e;
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const float* lrow = lse + (int64_t(b) * NH + h) * T_;
    const float* drow = D + (int64_t(b) * NH + h) * T_;
    for (int q0 = k0 / BQ * BQ; q0 < T_; q0 += BQ) {
      __syncthreads();
      for (int e = threadIdx.x; e < BQ * HS; e += BK) {
        int ii = e / HS, d = e % HS, ig = q0 + ii;
        bool in = ig < T_;
        Qs[e] = in ? to_f(base[int64_t(ig) * C3 + h * HS + d]) : 0.f;
        dOs[e] = in ? to_f(dbase[int64_t(ig) * C + h * HS + d]) : 0.f;
      }
      for (int ii = threadIdx.x; ii < BQ; ii += BK) {
        bool in = q0 + ii < T_;
        Ls[ii] = in ? lrow[q0 + ii] * kLog2e : 0.f;
        Ds[ii] = in ? drow[q0 + ii] : 0.f;
      }
      __syncthreads();
      if (j >= T_) continue;
      for (int ii = 0; ii < BQ; ++ii) {
        int i = q0 + ii;
        if (i < j || i >= T_) continue;
        const float* qi = Qs + ii * HS;
        const float* gi = dOs + ii * HS;
        float s = 0.f, dp = 0.f;
#pragma unroll
        for (int d = 0; d < HS; ++d) {
          s += qi[d] * Kt[d * (BK + 1) + threadIdx.x];
          dp += gi[d] * Vt[d * (BK + 1) + threadIdx.x];
        }
        float p = exp2f(s * sl2 - Ls[ii]);
        float ds = p * (dp - Ds[ii]);
#pragma unroll
        for (int d = 0; d < HS; ++d) {
          dv[d] += p * gi[d];
          dk[d] += ds * qi[d];
        }
      }
    }
  }
  if (j >= T_) return;
  T* row = dqkv + (int64_t(b) * T_ + j) * C3;
#pragma unroll
  for (int d = 0; d < HS; ++d) {
    row[koff + d] = from_f<T>(dk[d] * scale);
    row[voff + d] = from_f<T>(dv[d]);
  }
}

template <typename T, int HS>
__global__ void attention_dq_backward_kernel(T* dqkv, const T* dout, const T* qkv,
                                             const float* lse, const float* D, int T_, int NH,
                                             int G, float scale) {
  constexpr int BQ = AttnTiles<HS>::kDqQ, BK = AttnTiles<HS>::kDqK;
  extern __shared__ float smem[];
  float* Qt = smem;                  // (HS, BQ+1)
  float* dOt = Qt + HS * (BQ + 1);   // (HS, BQ+1)
  float* Ks = dOt + HS * (BQ + 1);   // (BK, HS)
  float* Vs = Ks + BK * HS;          // (BK, HS)
  const int C = NH * HS, C3 = (NH + 2 * G) * HS;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ;
  const int b = blockIdx.y / NH, h = blockIdx.y % NH, kvh = h / (NH / G);
  const int koff = C + kvh * HS, voff = C + (G + kvh) * HS;
  const int i = q0 + threadIdx.x;
  const T* base = qkv + int64_t(b) * T_ * C3;
  const T* dbase = dout + int64_t(b) * T_ * C;
  for (int e = threadIdx.x; e < BQ * HS; e += BQ) {
    int ii = e / HS, d = e % HS, ig = q0 + ii;
    bool in = ig < T_;
    Qt[d * (BQ + 1) + ii] = in ? to_f(base[int64_t(ig) * C3 + h * HS + d]) : 0.f;
    dOt[d * (BQ + 1) + ii] = in ? to_f(dbase[int64_t(ig) * C + h * HS + d]) : 0.f;
  }
  const bool valid = i < T_;
  const int64_t r = (int64_t(b) * NH + h) * T_ + i;
  const float l2 = valid ? lse[r] * kLog2e : 0.f, Di = valid ? D[r] : 0.f;
  const float sl2 = scale * kLog2e;
  float dq[HS];
#pragma unroll
  for (int d = 0; d < HS; ++d) dq[d] = 0.f;
  const int last_key = min(T_ - 1, q0 + BQ - 1);
  for (int k0 = 0; k0 <= last_key; k0 += BK) {
    __syncthreads();
    for (int e = threadIdx.x; e < BK * HS; e += BQ) {
      int jj = e / HS, d = e % HS, jg = k0 + jj;
      bool in = jg < T_;
      Ks[e] = in ? to_f(base[int64_t(jg) * C3 + koff + d]) : 0.f;
      Vs[e] = in ? to_f(base[int64_t(jg) * C3 + voff + d]) : 0.f;
    }
    __syncthreads();
    if (!valid) continue;
    for (int jj = 0; jj < BK && k0 + jj <= i; ++jj) {
      const float* kj = Ks + jj * HS;
      const float* vj = Vs + jj * HS;
      float s = 0.f, dp = 0.f;
#pragma unroll
      for (int d = 0; d < HS; ++d) {
        s += Qt[d * (BQ + 1) + threadIdx.x] * kj[d];
        dp += dOt[d * (BQ + 1) + threadIdx.x] * vj[d];
      }
      float p = exp2f(s * sl2 - l2);
      float ds = p * (dp - Di);
#pragma unroll
      for (int d = 0; d < HS; ++d) dq[d] += ds * kj[d];
    }
  }
  if (!valid) return;
  T* row = dqkv + (int64_t(b) * T_ + i) * C3 + h * HS;
#pragma unroll
  for (int d = 0; d < HS; ++d) row[d] = from_f<T>(dq[d] * scale);
}

// ---- launchers ----

// TRIPOD_CUDA_ATTENTION, parsed once (values in attention_tc.cuh).
struct AttentionChoice {
  AttentionImpl impl = AttentionImpl::kAuto;
  CudnnDq dq = CudnnDq::kAuto;
};

const AttentionChoice& attention_choice() {
  static const AttentionChoice c = [] {
    using A = DebugConfig::CudaAttention;
    switch (debug_config().cuda_attention) {
      case A::kCudnn: return AttentionChoice{AttentionImpl::kCudnn, CudnnDq::kAuto};
      case A::kCudnnDet: return AttentionChoice{AttentionImpl::kCudnn, CudnnDq::kDeterministic};
      case A::kCudnnAtomic: return AttentionChoice{AttentionImpl::kCudnn, CudnnDq::kAtomic};
      case A::kWmma: return AttentionChoice{AttentionImpl::kWmma, CudnnDq::kAuto};
      case A::kScalar: return AttentionChoice{AttentionImpl::kScalar, CudnnDq::kAuto};
      case A::kAuto: break;
    }
    return AttentionChoice{};
  }();
  return c;
}

AttentionImpl attention_impl() { return attention_choice().impl; }

// cuDNN first where the choice allows it (bf16/f16). Returns true when it ran;
// logs the path taken on first use.
static bool try_cudnn(bool ran, const std::string& why, DType dt, const char* pass) {
  const AttentionImpl impl = attention_impl();
  const char* dts = dt == DType::BF16 ? "bf16" : "f16";
  if (ran) {
    note_attention_path(std::string("attention ") + pass + " " + dts + ": cuDNN fused flash attention");
    return true;
  }
  if (impl == AttentionImpl::kCudnn)
    fail(std::string("TRIPOD_CUDA_ATTENTION=cudnn but cuDNN cannot run attention ") + pass + ": " + why);
  note_attention_path(std::string("attention ") + pass + " " + dts + ": own kernels (cuDNN: " + why + ")");
  return false;
}

static bool cudnn_allowed(DType dt) {
  const AttentionImpl impl = attention_impl();
  return (impl == AttentionImpl::kAuto || impl == AttentionImpl::kCudnn) && dt != DType::F32;
}

template <typename A, int HS>
void attention_forward_hs(A* out, float* lse, const A* qkv, int64_t B, int64_t T, int NH, int G,
                          cudaStream_t stream) {
  using Tiles = AttnTiles<HS>;
  dim3 grid(static_cast<unsigned>(ceil_div(T, Tiles::kFwdQ)), static_cast<unsigned>(B * NH));
  attention_forward_kernel<A, HS><<<grid, Tiles::kFwdQ, 0, stream>>>(
      out, lse, qkv, static_cast<int>(T), NH, G, 1.f / sqrtf(float(HS)));
  TRIPOD_LAUNCH_CHECK();
}

template <typename A, int HS>
void attention_backward_hs(A* dqkv, const A* dout, const A* qkv, const float* lse,
                           const float* D, int64_t B, int64_t T, int NH, int G, cudaStream_t stream) {
  using Tiles = AttnTiles<HS>;
  float scale = 1.f / sqrtf(float(HS));
  size_t kv_smem = sizeof(float) * (2 * HS * (Tiles::kBwdK + 1) + 2 * Tiles::kBwdQ * HS + 2 * Tiles::kBwdQ);
  size_t q_smem = sizeof(float) * (2 * HS * (Tiles::kDqQ + 1) + 2 * Tiles::kDqK * HS);
  TRIPOD_CUDA_CHECK(cudaFuncSetAttribute(attention_dkdv_backward_kernel<A, HS>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(kv_smem)));
  TRIPOD_CUDA_CHECK(cudaFuncSetAttribute(attention_dq_backward_kernel<A, HS>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(q_smem)));
  dim3 kv_grid(static_cast<unsigned>(ceil_div(T, Tiles::kBwdK)), static_cast<unsigned>(B * G));
  attention_dkdv_backward_kernel<A, HS><<<kv_grid, Tiles::kBwdK, kv_smem, stream>>>(
      dqkv, dout, qkv, lse, D, static_cast<int>(T), NH, G, scale);
  TRIPOD_LAUNCH_CHECK();
  dim3 q_grid(static_cast<unsigned>(ceil_div(T, Tiles::kDqQ)), static_cast<unsigned>(B * NH));
  attention_dq_backward_kernel<A, HS><<<q_grid, Tiles::kDqQ, q_smem, stream>>>(
      dqkv, dout, qkv, lse, D, static_cast<int>(T), NH, G, scale);
  TRIPOD_LAUNCH_CHECK();
}

#define TRIPOD_DISPATCH_HS(HS_, ...)                                                       \
  do {                                                                                     \
    switch (HS_) {                                                                         \
      case 32: { constexpr int kHS = 32; __VA_ARGS__; break; }                             \
      case 64: { constexpr int kHS = 64; __VA_ARGS__; break; }                             \
      case 128: { constexpr int kHS = 128; __VA_ARGS__; break; }                           \
      default: fail("cuda attention: head size " + std::to_string(HS_) + " not supported (32, 64 or 128)"); \
    }                                                                                      \
  } while (0)

void attention_forward(void* out, float* lse, const void* qkv, int64_t B, int64_t T, int NH, int G,
                       int HS, DType dt, cudaStream_t stream) {
  if (B * T == 0) return;
  if (cudnn_allowed(dt)) {
    std::string why;
    bool ran = cudnn_attention_forward(out, lse, qkv, B, T, NH, G, HS, dt, stream, &why);
    if (try_cudnn(ran, why, dt, "forward")) return;
  }
  const void* ptrs[] = {out, qkv};
  if (attention_impl() != AttentionImpl::kScalar &&
      attention_tc_supported(dt, HS, int64_t(NH) * HS, ptrs, 2)) {
    attention_forward_tc(out, lse, qkv, B, T, NH, G, HS, dt, stream);
    return;
  }
  TRIPOD_DISPATCH_ACT(dt, A, TRIPOD_DISPATCH_HS(HS, attention_forward_hs<A, kHS>(
      static_cast<A*>(out), lse, static_cast<const A*>(qkv), B, T, NH, G, stream)));
}

void attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out,
                        const float* lse, int64_t B, int64_t T, int NH, int G, int HS, DType dt,
                        float* scratch, cudaStream_t stream, bool deterministic) {
  if (B * T == 0) return;
  if (cudnn_allowed(dt)) {
    std::string why;
    // dQ by atomics unless the run asked for determinism (--deterministic-mode)
    // or TRIPOD_CUDA_ATTENTION forces a choice.
    CudnnDq dq = attention_choice().dq;
    if (dq == CudnnDq::kAuto) dq = deterministic ? CudnnDq::kDeterministic : CudnnDq::kAtomic;
    bool ran = cudnn_attention_backward(dqkv, dout, qkv, out, lse, scratch, B, T, NH, G, HS, dt, dq, stream,
                                        &why);
    if (try_cudnn(ran, why, dt, "backward")) return;
  }
  TRIPOD_DISPATCH_ACT(dt, A, {
    int64_t rows = B * T * NH;
    attention_rowdot_backward_kernel<A><<<static_cast<unsigned>(ceil_div(rows, 256)), 256, 0, stream>>>(
        scratch, static_cast<const A*>(dout), static_cast<const A*>(out), B, static_cast<int>(T), NH, HS);
    TRIPOD_LAUNCH_CHECK();
    const void* ptrs[] = {dqkv, dout, qkv, out};
    if (attention_impl() != AttentionImpl::kScalar &&
        attention_tc_supported(dt, HS, int64_t(NH) * HS, ptrs, 4)) {
      attention_backward_tc2(dqkv, dout, qkv, lse, scratch, B, T, NH, G, HS, dt, stream);
      return;
    }
    TRIPOD_DISPATCH_HS(HS, attention_backward_hs<A, kHS>(
        static_cast<A*>(dqkv), static_cast<const A*>(dout), static_cast<const A*>(qkv), lse,
        scratch, B, T, NH, G, stream));
  });
}

}  // namespace tripod::backend::cuda
