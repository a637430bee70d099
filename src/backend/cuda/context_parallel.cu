// Context parallelism's kernels: the K/V column copy, the block attention of
// the K/V ring (forward with the log-sum-exp merge, backward), the row
// gather of the all-to-all, and the RoPE table at given positions. CUDA versions of backend/cpu's
// attention_block.cpp; contracts in backend/ops.h.
//
// NOTE [Block attention kernels]
// In bf16/f16 the blocks run on cuDNN's fused flash attention
// (cudnn_attention_block_*, the graphs of cudnn_attention.cpp with a query
// window against a K/V window, causal only on the diagonal); its result
// merges into (out, lse) by block_merge_kernel, its gradients add into dqkv
// and dkv by add_rows_kernel. The kernels below are the f32 path, the
// reference the op harness holds cuDNN to, and the fallback.
// Straightforward, not tuned: one warp per row, a lane holding the row's
// elements e = lane + 32k (k < KPL = ceil(HS / 32)) in registers, dot
// products by warp shuffles, f32 math on CUDA cores. No atomics, so the
// results are deterministic.
// Forward: a warp per (b, h, query row t of the window) walks the window's
// K/V rows (j <= i on a causal block) with an online softmax, then writes
// (o, l) or merges them with the (out, lse) already there:
//   l' = log(e^lse + e^l),  out' = out e^(lse - l') + o e^(l - l').
// Backward (FlashAttention-2 split, with the final lse and D_t = dout_t .
// out_t from a first kernel): a warp per (b, h, query row) accumulates dQ
// over the K/V rows; a warp per (b, K/V head g, K/V row j) accumulates dK,
// dV over the query heads of g's group and their query rows (i >= j on a
// causal block). Each adds its sums to the gradient rows once.
#include "backend/cuda/common.cuh"
#include "backend/cuda/context_parallel.cuh"

#include <string>

#include "backend/cuda/attention_tc.cuh"
#include "backend/cuda/cudnn_attention.cuh"

namespace tripod::backend::cuda {

namespace {

constexpr int kWarps = 4;  // warps per block of the row kernels

__device__ __forceinline__ int64_t warp_index() {
  return (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
}

// x[k] = row[lane + 32k] (0 past HS), times s.
template <typename T, int KPL>
__device__ __forceinline__ void load_row(float (&x)[KPL], const T* row, int HS, int lane, float s = 1.f) {
#pragma unroll
  for (int k = 0; k < KPL; ++k) {
    const int e = lane + 32 * k;
    x[k] = e < HS ? to_f(row[e]) * s : 0.f;
  }
}

template <int KPL>
__device__ __forceinline__ float dot_row(const float (&x)[KPL], const float (&y)[KPL]) {
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < KPL; ++k) s += x[k] * y[k];
  return warp_sum(s);
}

// row[e] += x[k] (rounded once to T).
template <typename T, int KPL>
__device__ __forceinline__ void add_row(T* row, const float (&x)[KPL], int HS, int lane) {
#pragma unroll
  for (int k = 0; k < KPL; ++k) {
    const int e = lane + 32 * k;
    if (e < HS) row[e] = from_f<T>(to_f(row[e]) + x[k]);
  }
}

template <typename T>
__global__ void kv_copy_kernel(T* dst, const T* src, int64_t rows, int KV, int W, int off, bool from_qkv) {
  const int64_t n = rows * KV;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < n; x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = x / KV, e = x % KV;
    if (from_qkv) dst[x] = src[r * W + off + e];
    else dst[r * W + off + e] = src[x];
  }
}

// out row r = inp row index[r]; a thread per 4-byte word (head rows are
// whole words unless f16/bf16 with an odd HS, then 2-byte words).
template <typename W>
__global__ void gather_rows_kernel(W* out, const W* inp, const int32_t* index, int64_t rows, int64_t words) {
  const int64_t n = rows * words;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < n; x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = x / words, e = x % words;
    out[x] = inp[int64_t(index[r]) * words + e];
  }
}

template <typename T, int KPL>
__global__ void __launch_bounds__(32 * kWarps)
    block_forward_kernel(T* out, float* lse, const T* qkv, const T* kv, int64_t B, int64_t Tq, int64_t Tk, int NH,
                         int G, int HS, BlockWindow w, bool accumulate, float scale) {
  const int64_t wi = warp_index();
  if (wi >= B * NH * w.q_len) return;
  const int lane = threadIdx.x % 32;
  const int64_t i = wi % w.q_len, t = w.q_start + i;
  const int h = static_cast<int>((wi / w.q_len) % NH);
  const int64_t b = wi / (w.q_len * NH);
  const int W = (NH + 2 * G) * HS, KV = 2 * G * HS, C = NH * HS, g = h / (NH / G);
  float q[KPL], o[KPL], kr[KPL], vr[KPL];
  load_row<T, KPL>(q, qkv + (b * Tq + t) * W + int64_t(h) * HS, HS, lane, scale);
#pragma unroll
  for (int k = 0; k < KPL; ++k) o[k] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int64_t n = w.causal ? i + 1 : w.kv_len;
  for (int64_t j = 0; j < n; ++j) {
    const T* row = kv + (b * Tk + w.kv_start + j) * KV;
    load_row<T, KPL>(kr, row + int64_t(g) * HS, HS, lane);
    load_row<T, KPL>(vr, row + int64_t(G + g) * HS, HS, lane);
    const float s = dot_row<KPL>(q, kr);
    const float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn);
    l = l * corr + p;
#pragma unroll
    for (int k = 0; k < KPL; ++k) o[k] = o[k] * corr + p * vr[k];
    m = mn;
  }
  const float lb = m + logf(l), inv = 1.f / l;
  T* y = out + (b * Tq + t) * C + int64_t(h) * HS;
  float* lt = lse + (b * NH + h) * Tq + t;
  const float old = *lt;
  __syncwarp();  // every lane has read lse before lane 0 writes it
  if (accumulate && isfinite(old)) {
    const float hi = fmaxf(old, lb), merged = hi + logf(expf(old - hi) + expf(lb - hi));
    const float a = expf(old - merged), c = expf(lb - merged);
#pragma unroll
    for (int k = 0; k < KPL; ++k) {
      const int e = lane + 32 * k;
      if (e < HS) y[e] = from_f<T>(a * to_f(y[e]) + c * o[k] * inv);
    }
    if (lane == 0) *lt = merged;
  } else {
#pragma unroll
    for (int k = 0; k < KPL; ++k) {
      const int e = lane + 32 * k;
      if (e < HS) y[e] = from_f<T>(o[k] * inv);
    }
    if (lane == 0) *lt = lb;
  }
}

// D (B, NH, q_len) = dout . out over the window's rows.
template <typename T, int KPL>
__global__ void __launch_bounds__(32 * kWarps)
    block_rowdot_kernel(float* D, const T* dout, const T* out, int64_t B, int64_t Tq, int NH, int HS,
                        BlockWindow w) {
  const int64_t wi = warp_index();
  if (wi >= B * NH * w.q_len) return;
  const int lane = threadIdx.x % 32;
  const int64_t i = wi % w.q_len, t = w.q_start + i;
  const int h = static_cast<int>((wi / w.q_len) % NH);
  const int64_t b = wi / (w.q_len * NH), r = (b * Tq + t) * NH * HS + int64_t(h) * HS;
  float a[KPL], o[KPL];
  load_row<T, KPL>(a, dout + r, HS, lane);
  load_row<T, KPL>(o, out + r, HS, lane);
  const float d = dot_row<KPL>(a, o);
  if (lane == 0) D[(b * NH + h) * w.q_len + i] = d;
}

template <typename T, int KPL>
__global__ void __launch_bounds__(32 * kWarps)
    block_dq_kernel(T* dqkv, const T* dout, const T* qkv, const T* kv, const float* lse, const float* D, int64_t B,
                    int64_t Tq, int64_t Tk, int NH, int G, int HS, BlockWindow w, float scale) {
  const int64_t wi = warp_index();
  if (wi >= B * NH * w.q_len) return;
  const int lane = threadIdx.x % 32;
  const int64_t i = wi % w.q_len, t = w.q_start + i;
  const int h = static_cast<int>((wi / w.q_len) % NH);
  const int64_t b = wi / (w.q_len * NH);
  const int W = (NH + 2 * G) * HS, KV = 2 * G * HS, C = NH * HS, g = h / (NH / G);
  float q[KPL], dO[KPL], dq[KPL], kr[KPL], vr[KPL];
  load_row<T, KPL>(q, qkv + (b * Tq + t) * W + int64_t(h) * HS, HS, lane, scale);
  load_row<T, KPL>(dO, dout + (b * Tq + t) * C + int64_t(h) * HS, HS, lane);
#pragma unroll
  for (int k = 0; k < KPL; ++k) dq[k] = 0.f;
  const float l = lse[(b * NH + h) * Tq + t], Di = D[(b * NH + h) * w.q_len + i];
  const int64_t n = w.causal ? i + 1 : w.kv_len;
  for (int64_t j = 0; j < n; ++j) {
    const T* row = kv + (b * Tk + w.kv_start + j) * KV;
    load_row<T, KPL>(kr, row + int64_t(g) * HS, HS, lane);
    load_row<T, KPL>(vr, row + int64_t(G + g) * HS, HS, lane);
    const float p = expf(dot_row<KPL>(q, kr) - l);
    const float ds = p * (dot_row<KPL>(dO, vr) - Di) * scale;
#pragma unroll
    for (int k = 0; k < KPL; ++k) dq[k] += ds * kr[k];
  }
  add_row<T, KPL>(dqkv + (b * Tq + t) * W + int64_t(h) * HS, dq, HS, lane);
}

template <typename T, int KPL>
__global__ void __launch_bounds__(32 * kWarps)
    block_dkdv_kernel(T* dkv, const T* dout, const T* qkv, const T* kv, const float* lse, const float* D, int64_t B,
                      int64_t Tq, int64_t Tk, int NH, int G, int HS, BlockWindow w, float scale) {
  const int64_t wi = warp_index();
  if (wi >= B * G * w.kv_len) return;
  const int lane = threadIdx.x % 32;
  const int64_t j = wi % w.kv_len;
  const int g = static_cast<int>((wi / w.kv_len) % G);
  const int64_t b = wi / (w.kv_len * G);
  const int W = (NH + 2 * G) * HS, KV = 2 * G * HS, C = NH * HS, group = NH / G;
  T* drow = dkv + (b * Tk + w.kv_start + j) * KV;
  const T* row = kv + (b * Tk + w.kv_start + j) * KV;
  float kr[KPL], vr[KPL], dk[KPL], dv[KPL], q[KPL], dO[KPL];
  load_row<T, KPL>(kr, row + int64_t(g) * HS, HS, lane);
  load_row<T, KPL>(vr, row + int64_t(G + g) * HS, HS, lane);
#pragma unroll
  for (int k = 0; k < KPL; ++k) dk[k] = dv[k] = 0.f;
  for (int h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t i = w.causal ? j : 0; i < w.q_len; ++i) {
      const int64_t t = w.q_start + i;
      load_row<T, KPL>(q, qkv + (b * Tq + t) * W + int64_t(h) * HS, HS, lane);
      load_row<T, KPL>(dO, dout + (b * Tq + t) * C + int64_t(h) * HS, HS, lane);
      const float p = expf(dot_row<KPL>(q, kr) * scale - lse[(b * NH + h) * Tq + t]);
      const float ds = p * (dot_row<KPL>(dO, vr) - D[(b * NH + h) * w.q_len + i]) * scale;
#pragma unroll
      for (int k = 0; k < KPL; ++k) {
        dv[k] += p * dO[k];
        dk[k] += ds * q[k];
      }
    }
  }
  add_row<T, KPL>(drow + int64_t(g) * HS, dk, HS, lane);
  add_row<T, KPL>(drow + int64_t(G + g) * HS, dv, HS, lane);
}

__global__ void rope_positions_table_kernel(float* table, const int32_t* positions, int64_t T, int rot_dim,
                                            float base) {
  const int h = rot_dim / 2;
  const int64_t n = T * h;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < n; x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = x / h;
    const int i = static_cast<int>(x % h);
    const double theta = pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / static_cast<double>(rot_dim));
    const double angle = static_cast<double>(positions[t]) * theta;
    table[x] = static_cast<float>(cos(angle));
    table[n + x] = static_cast<float>(sin(angle));
  }
}

// Runs body with constexpr KPL = ceil(HS / 32) rounded up to 1, 2, 4 or 8.
#define TRIPOD_DISPATCH_KPL(HS, KPL, ...)                   \
  do {                                                      \
    if ((HS) <= 32) { constexpr int KPL = 1; __VA_ARGS__; } \
    else if ((HS) <= 64) { constexpr int KPL = 2; __VA_ARGS__; } \
    else if ((HS) <= 128) { constexpr int KPL = 4; __VA_ARGS__; } \
    else { constexpr int KPL = 8; __VA_ARGS__; }            \
  } while (0)

unsigned warp_grid(int64_t warps) { return static_cast<unsigned>(ceil_div(warps, kWarps)); }

// cuDNN's block result (o compact (B, q_len, C), l (B, NH, q_len)) into the
// window rows of (out, lse): merged by log-sum-exp as block_forward_kernel
// merges (accumulate), else copied. A thread per (b, h, row, element).
template <typename T>
__global__ void block_merge_kernel(T* out, float* lse, const T* o, const float* l, int64_t B, int64_t Tq, int NH,
                                   int HS, BlockWindow w, bool accumulate) {
  const int64_t C = int64_t(NH) * HS, n = B * w.q_len * C;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < n; x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = x % C, i = (x / C) % w.q_len, b = x / (C * w.q_len);
    const int h = static_cast<int>(e / HS);
    const float lb = l[(b * NH + h) * w.q_len + i];
    float* lt = lse + (b * NH + h) * Tq + w.q_start + i;
    T* y = out + (b * Tq + w.q_start + i) * C + e;
    const float old = *lt;
    if (accumulate && isfinite(old)) {
      const float hi = fmaxf(old, lb), merged = hi + logf(expf(old - hi) + expf(lb - hi));
      *y = from_f<T>(expf(old - merged) * to_f(*y) + expf(lb - merged) * to_f(o[x]));
    } else {
      *y = o[x];
    }
  }
}

// The lse rows after block_merge_kernel read them (a second pass, so no
// thread of the merge sees a row's lse already replaced).
__global__ void block_merge_lse_kernel(float* lse, const float* l, int64_t B, int64_t Tq, int NH, BlockWindow w,
                                       bool accumulate) {
  const int64_t n = B * NH * w.q_len;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < n; x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = x % w.q_len, bh = x / w.q_len;
    float* lt = lse + bh * Tq + w.q_start + i;
    const float old = *lt, lb = l[x];
    if (accumulate && isfinite(old)) {
      const float hi = fmaxf(old, lb);
      *lt = hi + logf(expf(old - hi) + expf(lb - hi));
    } else {
      *lt = lb;
    }
  }
}

// dst rows (batch stride dst_batch, row stride dst_row) += src (B, rows, width) compact.
template <typename T>
__global__ void add_rows_kernel(T* dst, const T* src, int64_t B, int64_t rows, int64_t width, int64_t dst_batch,
                                int64_t dst_row) {
  const int64_t n = B * rows * width;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < n; x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = x % width, r = (x / width) % rows, b = x / (width * rows);
    T* y = dst + b * dst_batch + r * dst_row + e;
    *y = from_f<T>(to_f(*y) + to_f(src[x]));
  }
}

}  // namespace

void attention_kv_copy(void* dst, const void* src, int64_t B, int64_t T, int NH, int G, int HS, bool from_qkv,
                       DType dt, cudaStream_t stream) {
  const int64_t n = B * T * 2 * G * HS;
  if (n == 0) return;
  constexpr int kBlock = 256;
  TRIPOD_DISPATCH_ACT(dt, A, {
    kv_copy_kernel<A><<<elementwise_grid(n, kBlock), kBlock, 0, stream>>>(
        static_cast<A*>(dst), static_cast<const A*>(src), B * T, 2 * G * HS, (NH + 2 * G) * HS, NH * HS, from_qkv);
  });
  TRIPOD_LAUNCH_CHECK();
}

void gather_rows(void* out, const void* inp, const int32_t* index, int64_t rows, int64_t row_bytes,
                 cudaStream_t stream) {
  if (rows == 0 || row_bytes == 0) return;
  constexpr int kBlock = 256;
  const bool aligned = reinterpret_cast<uintptr_t>(out) % 4 == 0 && reinterpret_cast<uintptr_t>(inp) % 4 == 0;
  if (row_bytes % 4 == 0 && aligned) {
    const int64_t words = row_bytes / 4;
    gather_rows_kernel<uint32_t><<<elementwise_grid(rows * words, kBlock), kBlock, 0, stream>>>(
        static_cast<uint32_t*>(out), static_cast<const uint32_t*>(inp), index, rows, words);
  } else {
    const int64_t words = row_bytes / 2;  // activation rows are whole 2-byte elements
    gather_rows_kernel<uint16_t><<<elementwise_grid(rows * words, kBlock), kBlock, 0, stream>>>(
        static_cast<uint16_t*>(out), static_cast<const uint16_t*>(inp), index, rows, words);
  }
  TRIPOD_LAUNCH_CHECK();
}

void attention_block_merge(void* out, float* lse, const void* o, const float* l, int64_t B, int64_t Tq, int NH,
                           int HS, const BlockWindow& w, bool accumulate, DType dt, cudaStream_t stream) {
  const int64_t n = B * w.q_len * int64_t(NH) * HS;
  if (n == 0) return;
  constexpr int kBlock = 256;
  TRIPOD_DISPATCH_ACT(dt, A, {
    block_merge_kernel<A><<<elementwise_grid(n, kBlock), kBlock, 0, stream>>>(
        static_cast<A*>(out), lse, static_cast<const A*>(o), l, B, Tq, NH, HS, w, accumulate);
  });
  TRIPOD_LAUNCH_CHECK();
  block_merge_lse_kernel<<<elementwise_grid(B * NH * w.q_len, kBlock), kBlock, 0, stream>>>(lse, l, B, Tq, NH, w,
                                                                                         accumulate);
  TRIPOD_LAUNCH_CHECK();
}

void add_rows(void* dst, const void* src, int64_t B, int64_t rows, int64_t width, int64_t dst_batch,
              int64_t dst_row, DType dt, cudaStream_t stream) {
  const int64_t n = B * rows * width;
  if (n == 0) return;
  constexpr int kBlock = 256;
  TRIPOD_DISPATCH_ACT(dt, A, {
    add_rows_kernel<A><<<elementwise_grid(n, kBlock), kBlock, 0, stream>>>(
        static_cast<A*>(dst), static_cast<const A*>(src), B, rows, width, dst_batch, dst_row);
  });
  TRIPOD_LAUNCH_CHECK();
}

// cuDNN runs the block when the choice allows it (bf16/f16, TRIPOD_CUDA_ATTENTION
// auto or cudnn) and the windows are long enough for a plan per shape to pay
// (not the one-row queries of generation); the kernels below otherwise.
static bool cudnn_block(DType dt, const BlockWindow& w) {
  const AttentionImpl impl = attention_impl();
  return dt != DType::F32 && (impl == AttentionImpl::kAuto || impl == AttentionImpl::kCudnn) && w.q_len >= 64 &&
         w.kv_len >= 64;
}

static bool cudnn_block_ran(bool ran, const std::string& why, DType dt, const char* pass) {
  const char* dts = dt == DType::BF16 ? "bf16" : "f16";
  if (ran) {
    note_attention_path(std::string("block attention (context parallelism) ") + pass + " " + dts +
                        ": cuDNN fused flash attention");
    return true;
  }
  if (attention_impl() == AttentionImpl::kCudnn)
    fail(std::string("TRIPOD_CUDA_ATTENTION=cudnn but cuDNN cannot run the block attention ") + pass + ": " + why);
  note_attention_path(std::string("block attention (context parallelism) ") + pass + " " + dts +
                      ": own kernels (cuDNN: " + why + ")");
  return false;
}

void attention_block_forward(void* out, float* lse, const void* qkv, const void* kv, int64_t B, int64_t Tq,
                             int64_t Tk, int NH, int G, int HS, const BlockWindow& w, bool accumulate, DType dt,
                             cudaStream_t stream) {
  const int64_t warps = B * NH * w.q_len;
  if (warps == 0) return;
  if (cudnn_block(dt, w)) {
    std::string why;
    const bool ran = cudnn_attention_block_forward(out, lse, qkv, kv, B, Tq, Tk, NH, G, HS, w, accumulate, dt,
                                                   stream, &why);
    if (cudnn_block_ran(ran, why, dt, "forward")) return;
  }
  const float scale = 1.f / sqrtf(static_cast<float>(HS));
  TRIPOD_DISPATCH_ACT(dt, A, TRIPOD_DISPATCH_KPL(HS, KPL, {
    block_forward_kernel<A, KPL><<<warp_grid(warps), 32 * kWarps, 0, stream>>>(
        static_cast<A*>(out), lse, static_cast<const A*>(qkv), static_cast<const A*>(kv), B, Tq, Tk, NH, G, HS, w,
        accumulate, scale);
  }));
  TRIPOD_LAUNCH_CHECK();
}

void attention_block_backward(void* dqkv, void* dkv, const void* dout, const void* qkv, const void* kv,
                              const void* out, const float* lse, int64_t B, int64_t Tq, int64_t Tk, int NH, int G,
                              int HS, const BlockWindow& w, float* scratch, DType dt, cudaStream_t stream,
                              bool deterministic) {
  const int64_t q_warps = B * NH * w.q_len, kv_warps = B * G * w.kv_len;
  if (q_warps == 0 || kv_warps == 0) return;
  if (cudnn_block(dt, w)) {
    std::string why;
    const bool ran = cudnn_attention_block_backward(dqkv, dkv, dout, qkv, kv, out, lse, scratch, B, Tq, Tk, NH, G,
                                                    HS, w, deterministic ? CudnnDq::kDeterministic : CudnnDq::kAtomic,
                                                    dt, stream, &why);
    if (cudnn_block_ran(ran, why, dt, "backward")) return;
  }
  const float scale = 1.f / sqrtf(static_cast<float>(HS));
  TRIPOD_DISPATCH_ACT(dt, A, TRIPOD_DISPATCH_KPL(HS, KPL, {
    const A* o = static_cast<const A*>(out);
    const A* dO = static_cast<const A*>(dout);
    const A* q = static_cast<const A*>(qkv);
    const A* k = static_cast<const A*>(kv);
    block_rowdot_kernel<A, KPL><<<warp_grid(q_warps), 32 * kWarps, 0, stream>>>(scratch, dO, o, B, Tq, NH, HS, w);
    block_dq_kernel<A, KPL><<<warp_grid(q_warps), 32 * kWarps, 0, stream>>>(
        static_cast<A*>(dqkv), dO, q, k, lse, scratch, B, Tq, Tk, NH, G, HS, w, scale);
    block_dkdv_kernel<A, KPL><<<warp_grid(kv_warps), 32 * kWarps, 0, stream>>>(
        static_cast<A*>(dkv), dO, q, k, lse, scratch, B, Tq, Tk, NH, G, HS, w, scale);
  }));
  TRIPOD_LAUNCH_CHECK();
}

void rope_positions_table(float* table, const int32_t* positions, int64_t T, int rot_dim, float base,
                          cudaStream_t stream) {
  const int64_t n = T * (rot_dim / 2);
  if (n == 0) return;
  constexpr int kBlock = 256;
  rope_positions_table_kernel<<<elementwise_grid(n, kBlock), kBlock, 0, stream>>>(table, positions, T, rot_dim,
                                                                                   base);
  TRIPOD_LAUNCH_CHECK();
}

}  // namespace tripod::backend::cuda
