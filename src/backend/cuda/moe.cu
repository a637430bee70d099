// The MoE dispatch order and the row gathers around the experts (CUDA
// version of backend/cpu's moe.cpp; contracts in backend/ops.h):
//   moe_permute_map   one block per expert: its slots in slot order by a
//                     block-wide prefix sum over the slots; the offsets are
//                     the kept counts of the lower experts (a first pass
//                     counts them). Integer work only, so the map is the
//                     reference's exactly; with a capacity and the "probs"
//                     drop policy a slot is kept when fewer than capacity
//                     slots of its expert rank above it (higher prob, or
//                     equal and earlier), the reference's stable sort.
//   moe_permute       a gather of whole rows (16-byte packs where C allows).
//   moe_unpermute     the inverse map (slot -> row) first, then per token the
//                     sum of its kept rows in slot order, in f32.
//   moe_unpermute_backward  a warp per row: the scaled copy and the dot
//                     product for d probs (fixed warp tree).
#include "backend/cuda/common.cuh"
#include "backend/cuda/moe.cuh"

namespace tripod::backend::cuda {

namespace {

constexpr int kScan = 256;  // threads of the permute-map blocks (a power of two)

// Exclusive prefix sum of v over the block (Hillis-Steele in shared memory);
// *total gets the block's sum. Every thread must call it.
__device__ int block_exclusive_scan(int v, int* sh, int* total) {
  const int t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  for (int o = 1; o < blockDim.x; o <<= 1) {
    const int x = t >= o ? sh[t - o] : 0;
    __syncthreads();
    sh[t] += x;
    __syncthreads();
  }
  const int incl = sh[t];
  *total = sh[blockDim.x - 1];
  __syncthreads();  // sh is free again
  return incl - v;
}

// raw[e] = the slots routed to expert e (one block per expert).
__global__ void count_kernel(int32_t* raw, const int32_t* indices, int64_t slots) {
  __shared__ int cnt;
  if (threadIdx.x == 0) cnt = 0;
  __syncthreads();
  int mine = 0;
  for (int64_t s = threadIdx.x; s < slots; s += blockDim.x) mine += indices[s] == static_cast<int32_t>(blockIdx.x);
  atomicAdd(&cnt, mine);  // integers: the same sum in any order
  __syncthreads();
  if (threadIdx.x == 0) raw[blockIdx.x] = cnt;
}

__device__ __forceinline__ int64_t kept_of(int32_t raw, int64_t capacity) {
  return capacity < 0 ? raw : (raw < capacity ? raw : capacity);
}

// One block per expert e: counts[e] and its kept slots, in slot order, at
// row_map[offset_e ...].
__global__ void map_kernel(int32_t* row_map, int32_t* counts, const int32_t* raw, const int32_t* indices,
                           const float* probs, int64_t slots, int64_t E, int64_t capacity, bool drop_by_probs) {
  __shared__ int sh[kScan];
  const int32_t e = static_cast<int32_t>(blockIdx.x);
  int64_t offset = 0;
  for (int64_t i = 0; i < e; ++i) offset += kept_of(raw[i], capacity);
  const int64_t kept = kept_of(raw[e], capacity);
  if (threadIdx.x == 0) counts[e] = static_cast<int32_t>(kept);
  const bool by_probs = drop_by_probs && kept < raw[e];
  int64_t base = 0;
  for (int64_t s0 = 0; s0 < slots; s0 += blockDim.x) {
    const int64_t s = s0 + threadIdx.x;
    bool keep = s < slots && indices[s] == e;
    if (keep && by_probs) {  // rank among e's slots by (prob descending, slot ascending)
      const float p = probs[s];
      int64_t rank = 0;
      for (int64_t s2 = 0; s2 < slots && rank < capacity; ++s2)
        rank += indices[s2] == e && (probs[s2] > p || (probs[s2] == p && s2 < s));
      keep = rank < capacity;
    }
    int total;
    const int64_t pos = base + block_exclusive_scan(keep ? 1 : 0, sh, &total);
    if (keep && pos < kept) row_map[offset + pos] = static_cast<int32_t>(s);  // "position": the first kept
    base += total;
  }
}

// row_map[r] = -1 for the rows past the kept ones.
__global__ void map_tail_kernel(int32_t* row_map, const int32_t* counts, int64_t slots, int64_t E) {
  int64_t total = 0;
  for (int64_t e = 0; e < E; ++e) total += counts[e];
  for (int64_t r = total + blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < slots;
       r += int64_t(gridDim.x) * blockDim.x)
    row_map[r] = -1;
}

template <typename T, int VW> struct alignas(sizeof(T) * VW) Vec {
  T v[VW];
};

template <typename T, int VW>
__global__ void permute_kernel(T* out, const T* inp, const int32_t* row_map, int64_t R, int64_t C, int k) {
  using V = Vec<T, VW>;
  const int64_t packs = C / VW, n = R * packs;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / packs, c = (i % packs) * VW;
    *reinterpret_cast<V*>(out + r * C + c) = *reinterpret_cast<const V*>(inp + (row_map[r] / k) * C + c);
  }
}

__global__ void inverse_kernel(int32_t* inverse, const int32_t* row_map, int64_t R) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < R; r += int64_t(gridDim.x) * blockDim.x)
    inverse[row_map[r]] = static_cast<int32_t>(r);
}

template <typename T, int VW>
__global__ void unpermute_kernel(T* out, const T* inp, const int32_t* inverse, const float* probs, int64_t N,
                                 int64_t C, int k) {
  using V = Vec<T, VW>;
  const int64_t packs = C / VW, n_all = N * packs;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_all;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / packs, c = (i % packs) * VW;
    float acc[VW];
#pragma unroll
    for (int j = 0; j < VW; ++j) acc[j] = 0.f;
    for (int j = 0; j < k; ++j) {
      const int32_t r = inverse[n * k + j];
      if (r < 0) continue;
      const float w = probs ? probs[n * k + j] : 1.f;
      const V x = *reinterpret_cast<const V*>(inp + r * C + c);
#pragma unroll
      for (int q = 0; q < VW; ++q) acc[q] += w * to_f(x.v[q]);
    }
    V y;
#pragma unroll
    for (int q = 0; q < VW; ++q) y.v[q] = from_f<T>(acc[q]);
    *reinterpret_cast<V*>(out + n * C + c) = y;
  }
}

// A warp per row r: dinp[r] = p dout[n], dprobs[s] = dout[n] . inp[r].
template <typename T>
__global__ void unpermute_backward_kernel(T* dinp, float* dprobs, const T* dout, const T* inp,
                                          const int32_t* row_map, const float* probs, int64_t R, int64_t C, int k) {
  const int64_t r = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= R) return;
  const int32_t s = row_map[r];
  const int64_t n = s / k;
  const float p = probs[s];
  float dot = 0.f;
  for (int64_t c = lane; c < C; c += 32) {
    const float d = to_f(dout[n * C + c]);
    dinp[r * C + c] = from_f<T>(p * d);
    dot += d * to_f(inp[r * C + c]);
  }
  dot = warp_sum(dot);
  if (lane == 0) dprobs[s] = dot;
}

constexpr int kBlock = 256;

}  // namespace

void moe_permute_map(int32_t* row_map, int32_t* counts, const int32_t* indices, const float* probs, int64_t slots,
                     int64_t E, int64_t capacity, bool drop_by_probs, int32_t* scratch, cudaStream_t stream) {
  count_kernel<<<static_cast<unsigned>(E), kScan, 0, stream>>>(scratch, indices, slots);
  TRIPOD_LAUNCH_CHECK();
  map_kernel<<<static_cast<unsigned>(E), kScan, 0, stream>>>(row_map, counts, scratch, indices, probs, slots, E,
                                                             capacity, drop_by_probs);
  TRIPOD_LAUNCH_CHECK();
  if (slots == 0) return;
  map_tail_kernel<<<elementwise_grid(slots, kBlock), kBlock, 0, stream>>>(row_map, counts, slots, E);
  TRIPOD_LAUNCH_CHECK();
}

void moe_permute(void* out, const void* inp, const int32_t* row_map, int64_t R, int64_t C, int k, DType dt,
                 cudaStream_t stream) {
  if (R * C == 0) return;
  TRIPOD_DISPATCH_ACT(dt, T, {
    if (packable<T>(C, out, inp))
      permute_kernel<T, kPack<T>><<<elementwise_grid(R * C / kPack<T>, kBlock), kBlock, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(inp), row_map, R, C, k);
    else
      permute_kernel<T, 1><<<elementwise_grid(R * C, kBlock), kBlock, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(inp), row_map, R, C, k);
  });
  TRIPOD_LAUNCH_CHECK();
}

void moe_unpermute(void* out, const void* inp, const int32_t* row_map, const float* probs, int64_t N, int64_t R,
                   int64_t C, int k, int32_t* inverse, DType dt, cudaStream_t stream) {
  if (N * C == 0) return;
  TRIPOD_CUDA_CHECK(cudaMemsetAsync(inverse, 0xff, static_cast<size_t>(N * k) * sizeof(int32_t), stream));  // -1
  if (R > 0) {
    inverse_kernel<<<elementwise_grid(R, kBlock), kBlock, 0, stream>>>(inverse, row_map, R);
    TRIPOD_LAUNCH_CHECK();
  }
  TRIPOD_DISPATCH_ACT(dt, T, {
    if (packable<T>(C, out, inp))
      unpermute_kernel<T, kPack<T>><<<elementwise_grid(N * C / kPack<T>, kBlock), kBlock, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(inp), inverse, probs, N, C, k);
    else
      unpermute_kernel<T, 1><<<elementwise_grid(N * C, kBlock), kBlock, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(inp), inverse, probs, N, C, k);
  });
  TRIPOD_LAUNCH_CHECK();
}

void moe_unpermute_backward(void* dinp, float* dprobs, const void* dout, const void* inp, const int32_t* row_map,
                            const float* probs, int64_t N, int64_t R, int64_t C, int k, DType dt,
                            cudaStream_t stream) {
  if (N * k > 0) TRIPOD_CUDA_CHECK(cudaMemsetAsync(dprobs, 0, static_cast<size_t>(N * k) * sizeof(float), stream));
  if (R == 0) return;
  constexpr int kRowsPerBlock = kBlock / 32;
  TRIPOD_DISPATCH_ACT(dt, T, {
    unpermute_backward_kernel<T><<<static_cast<unsigned>(ceil_div(R, kRowsPerBlock)), kBlock, 0, stream>>>(
        static_cast<T*>(dinp), dprobs, static_cast<const T*>(dout), static_cast<const T*>(inp), row_map, probs, R, C,
        k);
  });
  TRIPOD_LAUNCH_CHECK();
}

// ---- the grouped GEMMs' pointer arrays (grouped_matmul.cpp) ----

namespace {
constexpr int kPtrsPerLaunch = 256;  // 2 KiB of kernel arguments

struct PtrBatch {
  const void* p[kPtrsPerLaunch];
  int n;
};

__global__ void fill_pointers_kernel(PtrBatch batch, void** out) {
  for (int i = threadIdx.x; i < batch.n; i += blockDim.x) out[i] = const_cast<void*>(batch.p[i]);
}
}  // namespace

void fill_pointers(void** out, const void* const* ptrs, int64_t n, cudaStream_t stream) {
  for (int64_t at = 0; at < n; at += kPtrsPerLaunch) {
    PtrBatch b{};
    b.n = static_cast<int>(n - at < kPtrsPerLaunch ? n - at : kPtrsPerLaunch);
    for (int i = 0; i < b.n; ++i) b.p[i] = ptrs[at + i];
    fill_pointers_kernel<<<1, 128, 0, stream>>>(b, out + at);
  }
}

}  // namespace tripod::backend::cuda
