// CPU reference: the linear layer through OpenBLAS gemm (row-major).
// CUDA version: backend/cuda/matmul.cu (cuBLASLt).
#include <cblas.h>

#include "backend/cpu/kernels.h"

namespace tripod::backend::cpu {
namespace {
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, double alpha,
          const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C,
          int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
}  // namespace

// out (N,OC) = inp (N,C) @ w (OC,C)^T + bias (OC)
template <typename T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int64_t N, int64_t C,
                    int64_t OC) {
  if (N == 0 || OC == 0) return;
  gemm(CblasNoTrans, CblasTrans, N, OC, C, T(1), inp, C, w, C, T(0), out, OC);
  if (bias) {
#pragma omp parallel for
    for (int64_t i = 0; i < N; ++i)
      for (int64_t o = 0; o < OC; ++o) out[i * OC + o] += bias[o];
  }
}

// dinp (N,C) = dout (N,OC) @ w (OC,C); dw (OC,C) += dout^T @ inp; dbias (OC) += sum_i dout
template <typename T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w,
                     int64_t N, int64_t C, int64_t OC) {
  if (dinp) gemm(CblasNoTrans, CblasNoTrans, N, C, OC, T(1), dout, OC, w, C, T(0), dinp, C);
  if (dw) gemm(CblasTrans, CblasNoTrans, OC, C, N, T(1), dout, OC, inp, C, T(1), dw, C);
  if (dbias) {
#pragma omp parallel for
    for (int64_t o = 0; o < OC; ++o) {
      double s = 0;
      for (int64_t i = 0; i < N; ++i) s += dout[i * OC + o];
      dbias[o] += static_cast<T>(s);
    }
  }
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, int64_t,
                                    int64_t, int64_t);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int64_t,
                                     int64_t, int64_t);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int64_t, int64_t, int64_t);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, int64_t, int64_t, int64_t);

}  // namespace tripod::backend::cpu
