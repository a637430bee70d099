// CUDA backend plumbing: the library check macros (message names the
// statement, file:line and device; runs without a GPU), a clear error for a
// missing device, and on a GPU the caching allocator (a freed block is
// handed out again, peak bytes tracked) and host<->device copies; the
// cuBLASLt algorithm buckets.
// Labels gpu, backend_ops.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cublaslt_util.h"
#include "backend/cuda/cuda_check.h"
#include "base/error.h"

namespace tripod::backend {
namespace {

// NOTE [Algorithms for shapes that vary] (matmul.cpp): small dimensions are
// their own bucket; larger ones round up to an eighth of their power of two.
TEST(CublasLtBuckets, RoundUpToAnEighthOfThePowerOfTwo) {
  using cuda::lt::shape_bucket;
  EXPECT_EQ(shape_bucket(1), 1);
  EXPECT_EQ(shape_bucket(128), 128);
  EXPECT_EQ(shape_bucket(129), 144);    // 128 / 8 = 16
  EXPECT_EQ(shape_bucket(1000), 1024);  // 512 / 8 = 64
  EXPECT_EQ(shape_bucket(1024), 1024);
  EXPECT_EQ(shape_bucket(1025), 1152);  // 1024 / 8 = 128
  EXPECT_EQ(shape_bucket(5632), 5632);  // 4096 / 8 = 512: 11 of them
  EXPECT_EQ(shape_bucket(5633), 6144);
  for (int64_t d = 129; d < 100000; d += 37) {  // never below d, never more than 1/8 above its power of two
    const int64_t b = shape_bucket(d);
    int64_t p = 1;
    while (p * 2 <= d) p *= 2;
    EXPECT_GE(b, d);
    EXPECT_LT(b - d, p / 8) << d;
  }
}

TEST(CudaCheck, MessageNamesStatementFileAndDevice) {
  try {
    TRIPOD_CUDA_CHECK(cudaErrorInvalidValue);
    FAIL() << "no throw";
  } catch (const Error& e) {
    std::string m = e.message(), w = e.where();
    EXPECT_NE(m.find("CUDA error 1"), std::string::npos) << m;
    EXPECT_NE(m.find("cudaErrorInvalidValue"), std::string::npos) << m;  // the statement
    EXPECT_NE(m.find(cudaGetErrorString(cudaErrorInvalidValue)), std::string::npos) << m;
    EXPECT_NE(m.find("on cuda:"), std::string::npos) << m;
    EXPECT_NE(w.find("test_cuda_runtime.cpp:"), std::string::npos) << w;
  }
  try {
    TRIPOD_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.message()).find("cuBLAS error 15"), std::string::npos) << e.message();
  }
}

TEST(CudaBackend, MissingDeviceIsAClearError) {
  const int n = cuda_device_count();
  try {
    make_cuda_backend(n + 3);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.message()).find(std::to_string(n) + " device(s) are visible"),
              std::string::npos) << e.message();
  }
}

TEST(CudaBackend, AllocatorReusesBlocksAndTracksPeak) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  auto be = make_cuda_backend(0);
  void* first = nullptr;
  {
    Tensor a = be->empty({1 << 18}, DType::F32);  // 1 MiB
    first = a.raw();
    be->synchronize();
  }
  Tensor b = be->empty({1 << 18}, DType::F32);
  EXPECT_EQ(b.raw(), first);  // same size bucket: the cached block comes back
  EXPECT_GE(be->peak_memory_bytes(), size_t(1) << 20);
  EXPECT_EQ(b.device(), Device::cuda(0));
}

TEST(CudaBackend, CopyRoundTripIsExact) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  auto be = make_cuda_backend(0);
  const int64_t n = 100003;
  Tensor h = Tensor::empty({n}, DType::F32), back = Tensor::empty({n}, DType::F32);
  std::mt19937 rng(5);
  std::normal_distribution<float> d;
  for (int64_t i = 0; i < n; ++i) h.data<float>()[i] = d(rng);
  Tensor g = be->empty({n}, DType::F32), g2 = be->empty({n}, DType::F32);
  be->copy(g, h);
  be->copy(g2, g);  // device to device
  be->copy(back, g2);
  be->synchronize();
  EXPECT_EQ(std::memcmp(h.raw(), back.raw(), h.nbytes()), 0);
}

}  // namespace
}  // namespace tripod::backend
