// cuBLASLt matmuls for the linear layers. Row-major (N, C) tensors are
// column-major (C, N) matrices to cuBLAS, so each product is written in its
// transposed, column-major form below. The bias is fused through the
// CUBLASLT_EPILOGUE_BIAS epilogue (saves a read+write of the output).
// Chosen algorithms are cached per shape, dtype and pointer alignment, so the
// heuristic query runs once per distinct call.
#include <algorithm>

#include "backend/cuda/matmul.cuh"

#include "backend/cuda/cublaslt_util.h"
#include "backend/cuda/cuda_check.h"
#include "base/error.h"

namespace tripod::backend::cuda {
namespace {

using lt::alignment_of;
using lt::cuda_type;
using lt::Layout;
using lt::MatmulDesc;
using lt::Preference;

}  // namespace

BlasLt::BlasLt(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  TRIPOD_CUBLAS_CHECK(cublasLtCreate(&handle_));
  TRIPOD_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

BlasLt::~BlasLt() {
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

bool BlasLt::gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* A,
                  int64_t lda, const void* B, int64_t ldb, DType ab_dt, void* D, int64_t ldd,
                  DType d_dt, float beta, const void* bias, cudaStream_t stream,
                  Epilogue epilogue, void* aux) {
  if (m == 0 || n == 0) return true;
  cudaDataType_t ab = cuda_type(ab_dt), dd = cuda_type(d_dt);
  MatmulDesc desc;
  TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  switch (epilogue) {
    case Epilogue::None: epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT; break;
    case Epilogue::GeluAux: epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX; break;
    case Epilogue::DGelu: epi = CUBLASLT_EPILOGUE_DGELU; break;
    case Epilogue::BGradB: epi = CUBLASLT_EPILOGUE_BGRADB; break;
  }
  TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (bias) {
    TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dd, sizeof(dd)));
  }
  if (epilogue == Epilogue::BGradB) {
    TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &aux, sizeof(aux)));
    TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dd, sizeof(dd)));
  } else if (epilogue != Epilogue::None) {
    const int64_t ld_aux = m;
    TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    TRIPOD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof(ld_aux)));
  }
  // Stored (column-major) shapes: A is (m, k) or, transposed, (k, m).
  Layout la, lb, ld;
  TRIPOD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la.l, ab, trans_a ? k : m, trans_a ? m : k, lda));
  TRIPOD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb.l, ab, trans_b ? n : k, trans_b ? k : n, ldb));
  TRIPOD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld.l, dd, m, n, ldd));

  int align = std::min({alignment_of(A), alignment_of(B), alignment_of(D),
                        bias ? alignment_of(bias) : 256, aux ? alignment_of(aux) : 256});
  Key key{trans_a, trans_b, m, n, k, static_cast<int>(ab_dt), static_cast<int>(d_dt),
          bias != nullptr, beta != 0.f, align, static_cast<int>(epilogue)};
  if (unsupported_.count(key)) return false;
  float alpha = 1.f;
  auto run = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(handle_, desc.d, &alpha, A, la.l, B, lb.l, &beta, D, ld.l, D, ld.l, &algo, workspace_,
                          workspace_bytes_, stream);
  };
  auto it = algos_.find(key);
  if (it == algos_.end()) {
    // NOTE [Algorithms for shapes that vary]
    // A mixture of experts' GEMMs see new row counts every step (the tokens
    // each expert got), and a heuristic query per new shape costs the host
    // more than the GEMM takes on the GPU. Once a bucket (each dimension
    // rounded up to an eighth of its power of two) has seen kBucketQueries
    // shapes of its own, a shape not seen before first tries the algorithm
    // chosen for the bucket's first shape; cuBLASLt refuses an algorithm
    // that does not fit the problem or the workspace
    // (CUBLAS_STATUS_INVALID_VALUE / NOT_SUPPORTED, before launching), and
    // then the shape gets a query of its own. A dense model's few fixed
    // shapes all get their own queries, as before.
    Key bkey = key;
    std::get<2>(bkey) = lt::shape_bucket(m);
    std::get<3>(bkey) = lt::shape_bucket(n);
    std::get<4>(bkey) = lt::shape_bucket(k);
    constexpr int kBucketQueries = 2;
    auto b = bucket_algos_.find(bkey);
    if (b != bucket_algos_.end() && b->second.queries >= kBucketQueries && run(b->second.algo) == CUBLAS_STATUS_SUCCESS)
      return true;
    Preference pref;
    TRIPOD_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
    TRIPOD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_, sizeof(workspace_bytes_)));
    uint32_t a32 = static_cast<uint32_t>(align);
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      TRIPOD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, attr, &a32, sizeof(a32)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    TRIPOD_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, desc.d, la.l, lb.l, ld.l, ld.l,
                                                       pref.p, 1, &result, &found));
    if (found == 0 && epilogue == Epilogue::BGradB) {
      unsupported_.emplace(key, true);
      return false;
    }
    TRIPOD_CHECK(found > 0, "cuBLASLt found no algorithm for m={} n={} k={} ({} -> {}, bias={}, epilogue={})",
                 m, n, k, dtype_name(ab_dt), dtype_name(d_dt), bias != nullptr, static_cast<int>(epilogue));
    it = algos_.emplace(key, result.algo).first;
    ++bucket_algos_.try_emplace(bkey, BucketAlgo{result.algo, 0}).first->second.queries;
  }
  TRIPOD_CUBLAS_CHECK(run(it->second));
  return true;
}

// out^T (OC, N) = W (OC, C) . inp^T (C, N): A = W stored (C, OC) col-major, transposed.
void matmul_forward(BlasLt& blas, void* out, const void* inp, const void* weight,
                    const void* bias, int64_t N, int64_t C, int64_t OC, DType dt,
                    cudaStream_t stream) {
  blas.gemm(true, false, OC, N, C, weight, C, inp, C, dt, out, OC, dt, 0.f, bias, stream);
}

bool matmul_backward(BlasLt& blas, void* dinp, void* dweight, DType dweight_dt, const void* dout,
                     const void* inp, const void* weight, int64_t N, int64_t C, int64_t OC,
                     DType dt, cudaStream_t stream, float* dbias_out) {
  // dinp^T (C, N) = W^T (C, OC) . dout^T (OC, N)
  if (dinp) blas.gemm(false, false, C, N, OC, weight, C, dout, OC, dt, dinp, C, dt, 0.f, nullptr, stream);
  // dweight^T (C, OC) += inp^T (C, N) . dout (N, OC); the column sums of
  // op(B) = dout over k = N are the bias gradient (BGRADB), written to dbias_out.
  if (!dweight) return false;
  if (dbias_out && dweight_dt == DType::F32 &&
      blas.gemm(false, true, C, OC, N, inp, C, dout, OC, dt, dweight, C, dweight_dt, 1.f, nullptr, stream,
                BlasLt::Epilogue::BGradB, dbias_out))
    return true;
  blas.gemm(false, true, C, OC, N, inp, C, dout, OC, dt, dweight, C, dweight_dt, 1.f, nullptr, stream);
  return false;
}

void matmul_forward_gelu(BlasLt& blas, void* out, void* pre, const void* inp, const void* weight,
                         const void* bias, int64_t N, int64_t C, int64_t OC, DType dt,
                         cudaStream_t stream) {
  blas.gemm(true, false, OC, N, C, weight, C, inp, C, dt, out, OC, dt, 0.f, bias, stream,
            BlasLt::Epilogue::GeluAux, pre);
}

void matmul_backward_dgelu(BlasLt& blas, void* dpre, const void* dout, const void* weight,
                           const void* pre, int64_t N, int64_t C, int64_t OC, DType dt,
                           cudaStream_t stream) {
  blas.gemm(false, false, C, N, OC, weight, C, dout, OC, dt, dpre, C, dt, 0.f, nullptr, stream,
            BlasLt::Epilogue::DGelu, const_cast<void*>(pre));
}

}  // namespace tripod::backend::cuda
