// Grouped GEMMs: the experts of a mixture of experts, each on its own rows,
// in one cuBLAS launch (backend/ops.h, grouped_matmul_forward /
// grouped_matmul_backward_data; CUDA side of the default loop there).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace tripod::backend::cuda {

// One problem of a grouped GEMM, column-major as cuBLAS sees it:
// D (m, n) = op(A) B with op(A) (m, k), B (k, n), D (m, n), beta 0.
struct GroupedProblem {
  const void* a;
  const void* b;
  void* d;
  int64_t n;  // the problem's own n (its rows); m, k and the leading dimensions are the call's
};

// out[0, n) = ptrs[0, n) on the stream, carried in kernel arguments (so no
// host buffer has to outlive the launch); moe.cu.
void fill_pointers(void** out, const void* const* ptrs, int64_t n, cudaStream_t stream);

class GroupedGemm {
 public:
  GroupedGemm();
  ~GroupedGemm();
  GroupedGemm(const GroupedGemm&) = delete;
  GroupedGemm& operator=(const GroupedGemm&) = delete;

  // Every problem in one cublasGemmGroupedBatchedEx call (f32 accumulation,
  // no TF32): transposed A (trans_a) or not, shared m, k, lda, ldb, ldd.
  // Returns false, having launched nothing, where cuBLAS refuses the call
  // (the caller then loops over the problems).
  bool run(bool trans_a, int64_t m, int64_t k, int64_t lda, int64_t ldb, int64_t ldd,
           const std::vector<GroupedProblem>& problems, DType dt, int device, cudaStream_t stream);
  // The backend's grouped ops: group g's rows[g] rows of b (width b_w,
  // groups in order) times weights[g] into the same rows of d (width d_w);
  // groups without rows or weight are skipped. False, having launched
  // nothing, where cuBLAS refuses: then, with one warning, for every later
  // call too (the caller loops over the groups).
  bool run_groups(bool trans_a, int64_t m, int64_t k, int64_t lda, int64_t ldb, int64_t ldd, Tensor& d,
                  const Tensor& b, const std::vector<const Tensor*>& weights, const std::vector<int64_t>& rows,
                  int64_t b_w, int64_t d_w, int device, cudaStream_t stream);

 private:
  cublasHandle_t handle_ = nullptr;
  bool refused_ = false;  // cuBLAS refused a grouped GEMM once: the loop from then on
};

}  // namespace tripod::backend::cuda
