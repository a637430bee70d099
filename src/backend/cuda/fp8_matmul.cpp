// cuBLASLt's FP8 GEMM (backend/cuda/fp8.cuh: Fp8Gemm). Row-major out(N, OC)
// is the column-major D(OC, N) = op(A) op(B) with A = b (row-major (OC, K)
// = column-major (K, OC), transposed) and B = a (column-major (K, N), as
// is): the "TN" layout, the only one Hopper's FP8 kernels take (both
// operands K-major). The per-tensor inverse scales ride as
// CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER (device f32 scalars, so scaling
// needs no host sync): D = (scale_A * scale_B) * (A B) (+ bias) (+ D).
// run_block: the block-scaled GEMM (NOTE [Block-scaled FP8 GEMM] below).
#include <algorithm>

#include "backend/cuda/cublaslt_util.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/fp8.cuh"

namespace tripod::backend::cuda {
namespace {

using lt::alignment_of;
using lt::cuda_type;
using lt::Layout;
using lt::MatmulDesc;
using lt::Preference;

// The TN call's three matrices: cuBLAS's A = b (K, OC), B = a (K, N), D = out (OC, N).
struct TnLayouts {
  Layout la, lb, ld;
  TnLayouts(DType a_fp8, DType b_fp8, cudaDataType_t out_type, int64_t N, int64_t K, int64_t OC) {
    TRIPOD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la.l, cuda_type(b_fp8), K, OC, K));
    TRIPOD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb.l, cuda_type(a_fp8), K, N, K));
    TRIPOD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld.l, out_type, OC, N, OC));
  }
};

// The descriptor both GEMMs share: f32 compute, TN, the inverse scales (of b
// as cuBLAS's A, of a as its B) and the BIAS epilogue when `bias`.
void describe_tn(MatmulDesc& desc, const float* a_scale_inv, const float* b_scale_inv, const void* bias,
                 cudaDataType_t out_type) {
  TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale_inv,
                                                     sizeof(b_scale_inv)));
  TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale_inv,
                                                     sizeof(a_scale_inv)));
  const cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (bias) {
    TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &out_type,
                                                       sizeof(out_type)));
  }
}

// The first algorithm cuBLASLt's heuristic offers for operands aligned to
// `align` bytes; false when it offers none (e.g. NOT_SUPPORTED).
bool first_algo(cublasLtHandle_t handle, const MatmulDesc& desc, const TnLayouts& l, int align, size_t workspace_bytes,
                cublasLtMatmulAlgo_t* algo) {
  Preference pref;
  TRIPOD_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
  TRIPOD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &workspace_bytes, sizeof(workspace_bytes)));
  const uint32_t a32 = static_cast<uint32_t>(align);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    TRIPOD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, attr, &a32, sizeof(a32)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle, desc.d, l.la.l, l.lb.l, l.ld.l, l.ld.l, pref.p, 1, &result, &found);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) return false;
  *algo = result.algo;
  return true;
}

}  // namespace

Fp8Gemm::~Fp8Gemm() {
  if (scales_) cudaFree(scales_);
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

void Fp8Gemm::init() {
  if (handle_) return;
  TRIPOD_CUBLAS_CHECK(cublasLtCreate(&handle_));
  TRIPOD_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
  TRIPOD_CUDA_CHECK(cudaMalloc(&scales_, 256));
}

void Fp8Gemm::matmul(void* out, DType dt, const void* a, DType a_fp8, const float* a_scale_inv, const void* b,
                     DType b_fp8, const float* b_scale_inv, const void* bias, bool accumulate, int64_t N, int64_t K,
                     int64_t OC, cudaStream_t stream, bool fast_accum) {
  const bool fuse_bias = bias && dt != DType::F32;  // the FP8 bias epilogue wants a 16-bit bias
  if (run(out, dt, a, a_fp8, a_scale_inv, b, b_fp8, b_scale_inv, fuse_bias ? bias : nullptr, accumulate, N, K, OC,
          stream, fast_accum)) {
    if (bias && !fuse_bias) add_bias(out, bias, N, OC, dt, stream);
    return;
  }
  fp8_matmul_fallback(out, dt, a, a_fp8, a_scale_inv, b, b_fp8, b_scale_inv, bias, accumulate, N, K, OC, stream);
}

void Fp8Gemm::matmul_block(void* out, DType dt, const void* a, DType a_fp8, const float* a_scale_inv, const void* b,
                           DType b_fp8, const float* b_scale_inv, bool b_tiles, const void* bias, bool accumulate,
                           int64_t N, int64_t K, int64_t OC, cudaStream_t stream) {
  if (!run_block(out, dt, a, a_fp8, a_scale_inv, b, b_fp8, b_scale_inv, b_tiles, bias, accumulate, N, K, OC, stream))
    fp8_block_matmul_fallback(out, dt, a, a_fp8, a_scale_inv, b, b_fp8, b_scale_inv, b_tiles, bias, accumulate, N, K,
                              OC, stream);
}

bool Fp8Gemm::run(void* out, DType dt, const void* a, DType a_fp8, const float* a_scale_inv, const void* b,
                  DType b_fp8, const float* b_scale_inv, const void* bias, bool accumulate, int64_t N, int64_t K,
                  int64_t OC, cudaStream_t stream, bool fast_accum) {
  if (N == 0 || OC == 0) return true;
  // FP8 kernels want 16-byte leading dimensions and pointers (cuBLAS docs, "FP8"); the f32 bias is
  // not an FP8 epilogue input.
  const int align = std::min({alignment_of(out), alignment_of(a), alignment_of(b), bias ? alignment_of(bias) : 256});
  if (K % 16 || OC % 16 || K == 0 || align < 16 || (bias && dt == DType::F32)) return false;
  Key key{N, K, OC, static_cast<int>(dt), static_cast<int>(a_fp8), static_cast<int>(b_fp8), bias != nullptr,
          accumulate, fast_accum, align};
  if (unsupported_.count(key)) return false;
  init();
  // The scale pointers must be 16-byte aligned for cuBLASLt's FP8 kernels
  // (the model's scales are 4-byte views into one tensor per linear): copy a
  // misaligned one, on the stream, into an aligned slot of our own.
  auto aligned_scale = [&](const float* sc, int slot) {
    if (alignment_of(sc) >= 16) return sc;
    float* dst = scales_ + slot * 32;  // 128-byte slots
    TRIPOD_CUDA_CHECK(cudaMemcpyAsync(dst, sc, sizeof(float), cudaMemcpyDeviceToDevice, stream));
    return static_cast<const float*>(dst);
  };
  a_scale_inv = aligned_scale(a_scale_inv, 0);
  b_scale_inv = aligned_scale(b_scale_inv, 1);

  MatmulDesc desc;
  const cudaDataType_t out_type = cuda_type(dt);
  describe_tn(desc, a_scale_inv, b_scale_inv, bias, out_type);
  const int8_t fast = fast_accum ? 1 : 0;
  TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  const TnLayouts l(a_fp8, b_fp8, out_type, N, K, OC);
  auto it = algos_.find(key);
  if (it == algos_.end()) {
    cublasLtMatmulAlgo_t algo;
    if (!first_algo(handle_, desc, l, align, workspace_bytes_, &algo)) {
      unsupported_.emplace(key, true);
      return false;
    }
    it = algos_.emplace(key, algo).first;
  }
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  const cublasStatus_t st = cublasLtMatmul(handle_, desc.d, &alpha, b, l.la.l, a, l.lb.l, &beta, out, l.ld.l, out,
                                           l.ld.l, &it->second, workspace_, workspace_bytes_, stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) {  // the heuristic offered it, the call refused: the fallback takes it
    unsupported_.emplace(key, true);
    return false;
  }
  TRIPOD_CUBLAS_CHECK(st);
  return true;
}

// NOTE [Block-scaled FP8 GEMM]
// The same TN call as run's, with the scale modes set: cuBLAS's A (our b)
// VEC128_32F or BLK128x128_32F, its B (our a) VEC128_32F, and the scale
// pointers the block arrays. The layouts of backend/ops.h are cuBLASLt's
// for a K-major (rows, K) operand: 1x128 [ceil(K/128)][rows], 128x128
// [ceil(rows/128)][ld], ld = ceil(K/128) rounded up to 4. Each row of a
// 1x128 array starts 16-byte aligned only when rows is a multiple of 4
// (Transformer Engine pads rows to 4 for this GEMM): OC is a multiple of 16
// already, N must be a multiple of 4. Hopper's kernels promote each
// 128-wide K block's tensor-core sum into the f32 accumulator times its two
// scales (DeepSeek-V3's recipe), which is why fast accumulation does not
// apply. Whether the BIAS epilogue combines with block scaling depends on
// the cuBLASLt version and dtypes: it is tried first, and where the
// heuristic or the call refuses it, the GEMM runs without it and
// cuda::add_bias adds the bias (also for an f32 out, as run).
bool Fp8Gemm::run_block(void* out, DType dt, const void* a, DType a_fp8, const float* a_scale_inv, const void* b,
                        DType b_fp8, const float* b_scale_inv, bool b_tiles, const void* bias, bool accumulate,
                        int64_t N, int64_t K, int64_t OC, cudaStream_t stream) {
  if (N == 0 || OC == 0) return true;
  const int align = std::min({alignment_of(out), alignment_of(a), alignment_of(b), bias ? alignment_of(bias) : 256});
  if (K % 16 || OC % 16 || N % 4 || K == 0 || align < 16 || alignment_of(a_scale_inv) < 16 ||
      alignment_of(b_scale_inv) < 16)
    return false;
  for (bool fused : {true, false}) {
    if (fused && !(bias && dt != DType::F32)) continue;
    const BlockKey key{N, K, OC, static_cast<int>(dt), static_cast<int>(a_fp8), static_cast<int>(b_fp8), b_tiles,
                       fused, accumulate, align};
    if (block_unsupported_.count(key)) continue;
    if (try_block(key, out, dt, a, a_fp8, a_scale_inv, b, b_fp8, b_scale_inv, b_tiles, fused ? bias : nullptr,
                  accumulate, N, K, OC, align, stream)) {
      if (bias && !fused) add_bias(out, bias, N, OC, dt, stream);
      return true;
    }
    block_unsupported_.emplace(key, true);
  }
  return false;
}

// One attempt of run_block's call (with or without the fused bias): false,
// having done nothing, where the heuristic offers no algorithm or the call
// returns NOT_SUPPORTED.
bool Fp8Gemm::try_block(const BlockKey& key, void* out, DType dt, const void* a, DType a_fp8,
                        const float* a_scale_inv, const void* b, DType b_fp8, const float* b_scale_inv, bool b_tiles,
                        const void* bias, bool accumulate, int64_t N, int64_t K, int64_t OC, int align,
                        cudaStream_t stream) {
  init();
  MatmulDesc desc;
  const cudaDataType_t out_type = cuda_type(dt);
  describe_tn(desc, a_scale_inv, b_scale_inv, bias, out_type);
  // cuBLAS's A is our b, its B our a: the scale modes follow.
  const cublasLtMatmulMatrixScale_t a_mode =
      b_tiles ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  const cublasLtMatmulMatrixScale_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  TRIPOD_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)));
  TRIPOD_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)));
  const TnLayouts l(a_fp8, b_fp8, out_type, N, K, OC);
  auto it = block_algos_.find(key);
  if (it == block_algos_.end()) {
    cublasLtMatmulAlgo_t algo;
    if (!first_algo(handle_, desc, l, align, workspace_bytes_, &algo)) return false;
    it = block_algos_.emplace(key, algo).first;
  }
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  const cublasStatus_t st = cublasLtMatmul(handle_, desc.d, &alpha, b, l.la.l, a, l.lb.l, &beta, out, l.ld.l, out,
                                           l.ld.l, &it->second, workspace_, workspace_bytes_, stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  TRIPOD_CUBLAS_CHECK(st);
  return true;
}

}  // namespace tripod::backend::cuda
