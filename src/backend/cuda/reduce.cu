// Deterministic column sums and sum of squares (see reduce.cuh).
// Block shapes: column reductions use 32 columns x 8 row-lanes per block, so
// a warp reads 32 consecutive elements of one row (coalesced), and the grid's
// second dimension splits the rows into colsum_chunks(N) chunks.
#include "backend/cuda/common.cuh"
#include "backend/cuda/reduce.cuh"

namespace tripod::backend::cuda {

// ---- kernels ----

template <typename T>
__global__ void bias_backward_kernel(float* partial, const T* dout, int64_t N, int64_t C) {
  __shared__ float acc[8][33];
  int64_t c = blockIdx.x * 32 + threadIdx.x;
  float s = 0.f;
  if (c < C)
    for (int64_t r = blockIdx.y * 8 + threadIdx.y; r < N; r += int64_t(gridDim.y) * 8)
      s += to_f(dout[r * C + c]);
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int i = 1; i < 8; ++i) s += acc[i][threadIdx.x];
    partial[blockIdx.y * C + c] = s;
  }
}

// dst(C) += sum over p of partial(P, C). A block owns 32 columns; its 32
// row-lanes each add every 32nd partial row (fixed order), then lane 0 of
// each column adds the 32 lane sums in order: deterministic, and 32x more
// loads in flight than one thread per column walking all P rows (which left
// the LayerNorm backward's finalize latency-bound at P ~ 1000).
template <typename G>
__global__ void colsum_finalize_kernel(G* dst, const float* partial, int P, int64_t C) {
  __shared__ float acc[32][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  float s = 0.f;
  if (c < C)
    for (int p = threadIdx.y; p < P; p += 32) s += partial[int64_t(p) * C + c];
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int i = 1; i < 32; ++i) s += acc[i][threadIdx.x];
    dst[c] = from_f<G>(to_f(dst[c]) + s);
  }
}

template <typename T>
__global__ void sum_squares_kernel(float* partial, const T* x, int64_t n) {
  __shared__ float shared[32];
  float s = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float v = to_f(x[i]);
    s += v * v;
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_squares_finalize_kernel(float* acc, const float* partial, int P) {
  __shared__ float shared[32];
  float s = 0.f;
  for (int i = threadIdx.x; i < P; i += blockDim.x) s += partial[i];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) acc[0] += s;
}

// ---- launchers ----

int colsum_chunks(int64_t N) {
  int64_t p = ceil_div(N, 64);
  return static_cast<int>(p < 1 ? 1 : (p > 128 ? 128 : p));
}

void colsum_finalize(void* dst, DType dst_dt, const float* partial, int P, int64_t C,
                     cudaStream_t stream) {
  unsigned grid = static_cast<unsigned>(ceil_div(C, 32));
  TRIPOD_DISPATCH_ACT(dst_dt, G, colsum_finalize_kernel<<<grid, dim3(32, 32), 0, stream>>>(
      static_cast<G*>(dst), partial, P, C));
  TRIPOD_LAUNCH_CHECK();
}

void bias_backward(void* dbias, DType dbias_dt, const void* dout, DType dt, int64_t N, int64_t OC,
                   float* scratch, cudaStream_t stream) {
  if (OC == 0) return;
  int P = colsum_chunks(N);
  dim3 grid(static_cast<unsigned>(ceil_div(OC, 32)), P), block(32, 8);
  TRIPOD_DISPATCH_ACT(dt, T, bias_backward_kernel<<<grid, block, 0, stream>>>(
      scratch, static_cast<const T*>(dout), N, OC));
  TRIPOD_LAUNCH_CHECK();
  colsum_finalize(dbias, dbias_dt, scratch, P, OC, stream);
}

void sum_squares(float* acc, const void* x, DType dt, int64_t n, float* scratch,
                 cudaStream_t stream) {
  TRIPOD_DISPATCH_ACT(dt, T, sum_squares_kernel<<<kSumSquaresBlocks, 256, 0, stream>>>(
      scratch, static_cast<const T*>(x), n));
  TRIPOD_LAUNCH_CHECK();
  sum_squares_finalize_kernel<<<1, 1024, 0, stream>>>(acc, scratch, kSumSquaresBlocks);
  TRIPOD_LAUNCH_CHECK();
}

}  // namespace tripod::backend::cuda
