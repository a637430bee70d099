// Grouped GEMMs through cublasGemmGroupedBatchedEx (grouped_matmul.cuh).
//
// NOTE [Grouped expert GEMMs]
// An expert gets a few hundred to a few thousand rows, and a GEMM that
// small with a narrow output (fc2's C columns forward, fc1's C columns in
// the data gradient) leaves most SMs idle when each expert runs alone: at
// C = 2048 and 1,024 rows a 128 x 256 tile grid is 64 tiles for 132 SMs.
// cuBLAS's grouped GEMM takes every expert's problem in one launch, so the
// experts' tiles share the waves. Each problem is its own group (its row
// count is its n); the host knows the counts already (the dispatch waited
// for them), and the device arrays of operand pointers that the call
// reads are written by a kernel whose arguments carry them, so no host
// buffer has to outlive the launch. The weight gradients stay one
// cuBLASLt GEMM per expert: they accumulate into f32 gradients, which the
// grouped call (one dtype for A, B and D) cannot, and their outputs
// (OC x C per expert) fill the GPU on their own.
#include "backend/cuda/grouped_matmul.cuh"

#include "backend/cuda/allocator.cuh"
#include "backend/cuda/cuda_check.h"
#include "base/error.h"
#include "base/log.h"

namespace tripod::backend::cuda {

GroupedGemm::GroupedGemm() { TRIPOD_CUBLAS_CHECK(cublasCreate(&handle_)); }

GroupedGemm::~GroupedGemm() {
  if (handle_) cublasDestroy(handle_);
}

bool GroupedGemm::run(bool trans_a, int64_t m, int64_t k, int64_t lda, int64_t ldb, int64_t ldd,
                      const std::vector<GroupedProblem>& problems, DType dt, int device, cudaStream_t stream) {
  const int G = static_cast<int>(problems.size());
  if (G == 0) return true;
  cudaDataType_t type;
  switch (dt) {
    case DType::BF16: type = CUDA_R_16BF; break;
    case DType::F16: type = CUDA_R_16F; break;
    case DType::F32: type = CUDA_R_32F; break;
    default: return false;
  }
  const int64_t limit = (int64_t{1} << 31) - 1;
  for (const auto& p : problems)
    if (p.n > limit) return false;
  if (m > limit || k > limit || lda > limit || ldb > limit || ldd > limit) return false;
  std::vector<cublasOperation_t> ta(G, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N), tb(G, CUBLAS_OP_N);
  std::vector<int> ms(G, static_cast<int>(m)), ns(G), ks(G, static_cast<int>(k)), ldas(G, static_cast<int>(lda)),
      ldbs(G, static_cast<int>(ldb)), ldds(G, static_cast<int>(ldd)), sizes(G, 1);
  std::vector<float> alpha(G, 1.f), beta(G, 0.f);
  std::vector<const void*> ptrs(3 * static_cast<size_t>(G));
  for (int g = 0; g < G; ++g) {
    ns[g] = static_cast<int>(problems[g].n);
    ptrs[g] = problems[g].a;
    ptrs[G + g] = problems[g].b;
    ptrs[2 * G + g] = problems[g].d;
  }
  Allocator& alloc = caching_allocator();
  const size_t bytes = ptrs.size() * sizeof(void*);
  auto* dev = static_cast<void**>(alloc.allocate(bytes, Device::cuda(device)));
  fill_pointers(dev, ptrs.data(), static_cast<int64_t>(ptrs.size()), stream);
  TRIPOD_CUDA_CHECK(cudaGetLastError());
  TRIPOD_CUBLAS_CHECK(cublasSetStream(handle_, stream));
  const cublasStatus_t st = cublasGemmGroupedBatchedEx(
      handle_, ta.data(), tb.data(), ms.data(), ns.data(), ks.data(), alpha.data(), dev, type, ldas.data(),
      dev + G, type, ldbs.data(), beta.data(), dev + 2 * G, type, ldds.data(), G, sizes.data(), CUBLAS_COMPUTE_32F);
  alloc.deallocate(dev, bytes, Device::cuda(device));  // stream-ordered reuse (NOTE [Caching allocator])
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) return false;
  TRIPOD_CUBLAS_CHECK(st);
  return true;
}

bool GroupedGemm::run_groups(bool trans_a, int64_t m, int64_t k, int64_t lda, int64_t ldb, int64_t ldd, Tensor& d,
                             const Tensor& b, const std::vector<const Tensor*>& weights,
                             const std::vector<int64_t>& rows, int64_t b_w, int64_t d_w, int device,
                             cudaStream_t stream) {
  if (refused_) return false;
  const size_t es = dtype_size(d.dtype());
  std::vector<GroupedProblem> problems;
  int64_t at = 0;
  for (size_t g = 0; g < rows.size(); at += rows[g], ++g) {
    if (!weights[g] || rows[g] == 0) continue;
    problems.push_back({weights[g]->raw(), static_cast<const char*>(b.raw()) + at * b_w * es,
                        static_cast<char*>(d.raw()) + at * d_w * es, rows[g]});
  }
  if (run(trans_a, m, k, lda, ldb, ldd, problems, d.dtype(), device, stream)) return true;
  refused_ = true;
  log::warn("cuBLAS refused a grouped GEMM ({} groups, m {} k {}, {}): the experts' GEMMs run one per expert",
            problems.size(), m, k, dtype_name(d.dtype()));
  return false;
}

}  // namespace tripod::backend::cuda
