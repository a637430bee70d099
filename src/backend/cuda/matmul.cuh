// Linear-layer matmuls through cuBLASLt (CUDA version of backend/cpu's
// matmul_forward / matmul_backward; contracts in backend/ops.h). Inputs are
// f32, bf16 or f16; accumulation is always f32 (CUBLAS_COMPUTE_32F, no TF32,
// so f32 runs match the CPU reference to f32 rounding).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "tensor/dtype.h"

namespace tripod::backend::cuda {

// A cuBLASLt handle, its workspace and a cache of chosen algorithms; one per
// backend (so per device and stream).
class BlasLt {
 public:
  explicit BlasLt(size_t workspace_bytes = size_t(32) << 20);
  ~BlasLt();
  BlasLt(const BlasLt&) = delete;
  BlasLt& operator=(const BlasLt&) = delete;

  // What the epilogue does to the product (cuBLASLt epilogues; aux is an
  // (m, n) column-major matrix of d_dt with leading dimension m):
  //   None      D = P (+ bias)
  //   GeluAux   aux = P + bias; D = gelu(aux)      (CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
  //   DGelu     D = P * gelu'(aux)                 (CUBLASLT_EPILOGUE_DGELU)
  //   BGradB    D = P; aux(n) = column sums of op(B) over k (CUBLASLT_EPILOGUE_BGRADB:
  //             a linear layer's bias gradient in the same pass as its weight gradient)
  // where P = op(A) op(B). GELU is the tanh approximation, as gelu_forward.
  enum class Epilogue { None, GeluAux, DGelu, BGradB };

  // Column-major D(m, n) = op(A) op(B) [+ bias(m) broadcast over n] + beta * D.
  // A, B of ab_dt; D (and bias) of d_dt. Returns false only for BGradB when
  // cuBLASLt has no algorithm for it (the caller reduces the bias itself).
  bool gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* A,
            int64_t lda, const void* B, int64_t ldb, DType ab_dt, void* D, int64_t ldd,
            DType d_dt, float beta, const void* bias, cudaStream_t stream,
            Epilogue epilogue = Epilogue::None, void* aux = nullptr);

 private:
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int, int, bool, bool, int, int>;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, cublasLtMatmulAlgo_t> algos_;
  struct BucketAlgo {
    cublasLtMatmulAlgo_t algo;  // the bucket's first shape's
    int queries;                // shapes of the bucket queried so far
  };
  std::map<Key, BucketAlgo> bucket_algos_;  // NOTE [Algorithms for shapes that vary]
  std::map<Key, bool> unsupported_;  // BGradB shapes without an algorithm
};

// out(N, OC) = inp(N, C) @ weight(OC, C)^T (+ bias(OC)); all of dtype dt.
void matmul_forward(BlasLt& blas, void* out, const void* inp, const void* weight,
                    const void* bias, int64_t N, int64_t C, int64_t OC, DType dt,
                    cudaStream_t stream);
// dinp(N, C) = dout @ weight (overwrite; may be null);
// dweight(OC, C) += dout^T @ inp (dweight f32 or dt; may be null). With
// dbias_out (OC floats) and an f32 dweight, the same GEMM also writes the
// column sums of dout there (overwrite) where cuBLASLt can: returns whether it did.
bool matmul_backward(BlasLt& blas, void* dinp, void* dweight, DType dweight_dt, const void* dout,
                     const void* inp, const void* weight, int64_t N, int64_t C, int64_t OC,
                     DType dt, cudaStream_t stream, float* dbias_out = nullptr);
// Fused fc layer: pre(N, OC) = inp @ weight^T + bias; out(N, OC) = gelu(pre).
void matmul_forward_gelu(BlasLt& blas, void* out, void* pre, const void* inp, const void* weight,
                         const void* bias, int64_t N, int64_t C, int64_t OC, DType dt,
                         cudaStream_t stream);
// dpre(N, C) = (dout(N, OC) @ weight(OC, C)) * gelu'(pre(N, C)) (overwrite):
// the input gradient of a linear layer whose input was gelu(pre).
void matmul_backward_dgelu(BlasLt& blas, void* dpre, const void* dout, const void* weight,
                           const void* pre, int64_t N, int64_t C, int64_t OC, DType dt,
                           cudaStream_t stream);

}  // namespace tripod::backend::cuda
