// Which block-scaled FP8 GEMMs cuBLASLt runs on this GPU, with which scale
// layouts, and how fast (the probe behind --fp8-recipe blockwise; docs/fp8.md).
// Not part of the product: built only by the bench_dev target.
//
// For each linear-layer GEMM (forward and dgrad: activation 1x128 x weight
// 128x128; wgrad: 1x128 x 1x128) and each FP8 dtype pair, it asks
// cuBLASLt's heuristic for an algorithm (TN, both operands K-major, f32
// compute), runs it on random codes with random power-of-two block scales
// (so a wrong scale layout shows as a large error), checks the result
// against a host f64 product of the decoded operands, and times it beside
// the per-tensor-scaled GEMM of the same shape.
//
// Scale layouts (row-major operand X (rows, K), K contiguous):
//   1x128    (VEC128_32F):     f32 [ceil(K/128)][rows]: block j of row r at j * rows + r
//   128x128  (BLK128x128_32F): f32 [ceil(rows/128)][ld], ld = ceil(K/128) rounded up to 4:
//                              tile (i, j) at i * ld + j
//
//   cmake --build build-cuda --target bench_dev
//   build-cuda/bench/dev/fp8_block_gemm_probe [M N K]...   (M tokens, N out features)
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)
#define LK(x)                                                                       \
  do {                                                                              \
    cublasStatus_t s_ = (x);                                                        \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                              \
      std::printf("cuBLAS status %d at %s:%d\n", int(s_), __FILE__, __LINE__); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

namespace {

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t rup4(int64_t a) { return (a + 3) / 4 * 4; }

enum Mode { kTensor = 0, kVec = 1, kBlk = 2 };
const char* mode_name(Mode m) { return m == kTensor ? "tensor" : m == kVec ? "1x128" : "128x128"; }

struct Operand {  // row-major (rows, K) codes and their scales
  int64_t rows, K;
  bool e5m2;
  Mode mode;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  double value(int64_t r, int64_t k) const {
    const uint8_t c = codes[size_t(r * K + k)];
    float v;
    if (e5m2) {
      __nv_fp8_e5m2 x;
      x.__x = c;
      v = float(x);
    } else {
      __nv_fp8_e4m3 x;
      x.__x = c;
      v = float(x);
    }
    return double(v) * scale(r, k);
  }
  double scale(int64_t r, int64_t k) const {
    if (mode == kTensor) return scales[0];
    if (mode == kVec) return scales[size_t((k / 128) * rows + r)];
    return scales[size_t((r / 128) * rup4(cdiv(K, 128)) + k / 128)];
  }
  size_t num_scales() const {
    return mode == kTensor ? 1 : mode == kVec ? size_t(cdiv(K, 128) * rows) : size_t(cdiv(rows, 128) * rup4(cdiv(K, 128)));
  }
};

Operand make(int64_t rows, int64_t K, bool e5m2, Mode mode, std::mt19937& rng) {
  Operand o{rows, K, e5m2, mode, {}, {}};
  std::normal_distribution<float> nd(0.f, 1.f);
  o.codes.resize(size_t(rows * K));
  for (auto& c : o.codes) {
    const float v = nd(rng) * 8.f;
    c = e5m2 ? __nv_fp8_e5m2(v).__x : __nv_fp8_e4m3(v).__x;
  }
  std::uniform_int_distribution<int> ex(-4, 3);
  o.scales.resize(o.num_scales());
  for (auto& s : o.scales) s = std::ldexp(1.f, ex(rng));
  return o;
}

struct Result {
  bool supported = false;
  double max_err = 0, ms = 0;
};

// out (M, N) row-major = a (M, K) . b (N, K)^T, as cuBLASLt's column-major
// D (N, M) = op(A) op(B) with A = b (TRANSA = T), B = a (TRANSB = N).
Result run(cublasLtHandle_t h, const Operand& a, const Operand& b, bool out_f32, bool bias, bool beta1, bool check,
           int reps) {
  Result res;
  const int64_t M = a.rows, N = b.rows, K = a.K;
  uint8_t *da, *db;
  float *sa, *sb;
  void *dout, *dbias = nullptr, *ws;
  const size_t ws_bytes = 64 << 20;
  CK(cudaMalloc(&da, a.codes.size()));
  CK(cudaMalloc(&db, b.codes.size()));
  CK(cudaMalloc(&sa, a.scales.size() * 4 + 16));
  CK(cudaMalloc(&sb, b.scales.size() * 4 + 16));
  const size_t osz = out_f32 ? 4 : 2;
  CK(cudaMalloc(&dout, size_t(M * N) * osz));
  CK(cudaMalloc(&ws, ws_bytes));
  CK(cudaMemcpy(da, a.codes.data(), a.codes.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, b.codes.data(), b.codes.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(sa, a.scales.data(), a.scales.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(sb, b.scales.data(), b.scales.size() * 4, cudaMemcpyHostToDevice));
  std::vector<float> init(static_cast<size_t>(M * N));
  std::vector<float> hbias(static_cast<size_t>(N));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> ud(-1.f, 1.f);
  for (auto& v : init) v = beta1 ? ud(rng) : 0.f;
  for (auto& v : hbias) v = ud(rng);
  auto upload_out = [&] {
    if (out_f32) {
      CK(cudaMemcpy(dout, init.data(), init.size() * 4, cudaMemcpyHostToDevice));
    } else {
      std::vector<__nv_bfloat16> t(init.size());
      for (size_t i = 0; i < t.size(); ++i) t[i] = __float2bfloat16(init[i]);
      CK(cudaMemcpy(dout, t.data(), t.size() * 2, cudaMemcpyHostToDevice));
    }
  };
  upload_out();
  if (bias) {
    std::vector<__nv_bfloat16> t(hbias.size());
    for (size_t i = 0; i < t.size(); ++i) t[i] = __float2bfloat16(hbias[i]);
    CK(cudaMalloc(&dbias, t.size() * 2));
    CK(cudaMemcpy(dbias, t.data(), t.size() * 2, cudaMemcpyHostToDevice));
  }

  cublasLtMatmulDesc_t desc;
  LK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  auto lt_mode = [](Mode m) {
    return m == kTensor ? CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F
           : m == kVec  ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                        : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  };
  const cublasLtMatmulMatrixScale_t am = lt_mode(b.mode), bm = lt_mode(a.mode);
  if (b.mode != kTensor || a.mode != kTensor) {
    LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &am, sizeof(am)));
    LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm, sizeof(bm)));
  }
  LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb, sizeof(sb)));
  LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof(sa)));
  const cudaDataType_t ot = out_f32 ? CUDA_R_32F : CUDA_R_16BF, bt = CUDA_R_16BF;
  if (bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof(dbias)));
    LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
  }
  cublasLtMatrixLayout_t la, lb, ld;
  LK(cublasLtMatrixLayoutCreate(&la, b.e5m2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3, K, N, K));
  LK(cublasLtMatrixLayoutCreate(&lb, a.e5m2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3, K, M, K));
  LK(cublasLtMatrixLayoutCreate(&ld, ot, N, M, N));
  cublasLtMatmulPreference_t pref;
  LK(cublasLtMatmulPreferenceCreate(&pref));
  LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                          sizeof(ws_bytes)));
  cublasLtMatmulHeuristicResult_t hr{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 1, &hr, &found);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    const float alpha = 1.f, beta = beta1 ? 1.f : 0.f;
    const cublasStatus_t rs =
        cublasLtMatmul(h, desc, &alpha, db, la, da, lb, &beta, dout, ld, dout, ld, &hr.algo, ws, ws_bytes, 0);
    CK(cudaDeviceSynchronize());
    if (rs == CUBLAS_STATUS_SUCCESS) {
      res.supported = true;
      if (check) {
        std::vector<float> got(size_t(M * N));
        if (out_f32) {
          CK(cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost));
        } else {
          std::vector<__nv_bfloat16> t(got.size());
          CK(cudaMemcpy(t.data(), dout, t.size() * 2, cudaMemcpyDeviceToHost));
          for (size_t i = 0; i < t.size(); ++i) got[i] = __bfloat162float(t[i]);
        }
        // Sampled rows and columns against f64 (every row when small).
        const int64_t step_m = M > 512 ? M / 97 : 1, step_n = N > 512 ? N / 89 : 1;
        for (int64_t m = 0; m < M; m += step_m)
          for (int64_t n = 0; n < N; n += step_n) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
              const double p = a.value(m, k) * b.value(n, k);
              ref += p;
              mag += std::fabs(p);
            }
            if (bias) ref += double(__bfloat162float(__float2bfloat16(hbias[size_t(n)])));
            if (beta1) ref += out_f32 ? double(init[size_t(m * N + n)])
                                      : double(__bfloat162float(__float2bfloat16(init[size_t(m * N + n)])));
            const double err = std::fabs(double(got[size_t(m * N + n)]) - ref) / (mag + 1e-30);
            if (err > res.max_err) res.max_err = err;
          }
      }
      if (reps > 0) {
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        for (int i = 0; i < 3; ++i)
          LK(cublasLtMatmul(h, desc, &alpha, db, la, da, lb, &beta, dout, ld, dout, ld, &hr.algo, ws, ws_bytes, 0));
        CK(cudaEventRecord(e0));
        for (int i = 0; i < reps; ++i)
          LK(cublasLtMatmul(h, desc, &alpha, db, la, da, lb, &beta, dout, ld, dout, ld, &hr.algo, ws, ws_bytes, 0));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        res.ms = ms / reps;
      }
    }
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
  cudaFree(da);
  cudaFree(db);
  cudaFree(sa);
  cudaFree(sb);
  cudaFree(dout);
  cudaFree(ws);
  if (dbias) cudaFree(dbias);
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> shapes;
  for (int i = 1; i + 2 < argc; i += 3)
    for (int j = 0; j < 3; ++j) shapes.push_back(std::atoll(argv[i + j]));
  if (shapes.empty())  // small checks (every output), then GPT-2 124M and Llama 3 8B layer GEMMs
    shapes = {256, 384, 768, 384, 256, 640, 8192, 2304, 768, 8192, 768, 3072, 768, 3072, 8192,
              8192, 6144, 4096, 8192, 4096, 14336, 4096, 14336, 8192, 8192, 28672, 4096};
  cublasLtHandle_t h;
  LK(cublasLtCreate(&h));
  int ver = int(cublasLtGetVersion());
  cudaDeviceProp p{};
  CK(cudaGetDeviceProperties(&p, 0));
  std::printf("fp8_block_gemm_probe: %s, cuBLASLt %d\n", p.name, ver);
  std::printf("%-20s %-8s %-8s %-9s %-7s %-5s %-5s %-4s %-10s %-9s %-9s\n", "M N K", "a", "b", "a x b", "out",
              "bias", "beta", "ok", "max err", "ms", "TFLOP/s");
  std::mt19937 rng(1234);
  for (size_t s = 0; s + 2 < shapes.size(); s += 3) {
    const int64_t M = shapes[s], N = shapes[s + 1], K = shapes[s + 2];
    const bool small = M * N * K <= int64_t(1) << 27;
    const int reps = small ? 0 : 20;
    struct Case {
      bool a5, b5;
      Mode am, bm;
      bool f32, bias, beta1;
    };
    const Case cases[] = {
        {false, false, kVec, kBlk, false, false, false},  // forward
        {false, false, kVec, kBlk, false, true, false},   // forward with bias
        {true, false, kVec, kBlk, false, false, false},   // dgrad, hybrid
        {false, false, kVec, kVec, true, false, true},    // wgrad into f32 main grads
        {true, false, kVec, kVec, true, false, true},     // wgrad, hybrid
        {false, false, kVec, kVec, false, false, true},   // wgrad into bf16
        {false, false, kBlk, kVec, false, false, false},  // the operands swapped
        {false, false, kTensor, kTensor, false, false, false},  // per-tensor reference
    };
    for (const Case& c : cases) {
      Operand a = make(M, K, c.a5, c.am, rng), b = make(N, K, c.b5, c.bm, rng);
      const Result r = run(h, a, b, c.f32, c.bias, c.beta1, true, reps);
      char shape[32];
      std::snprintf(shape, sizeof shape, "%lld %lld %lld", (long long)M, (long long)N, (long long)K);
      std::printf("%-20s %-8s %-8s %-9s %-7s %-5d %-5d %-4s %-10.2e %-9.4f %-9.1f\n", shape, mode_name(c.am),
                  mode_name(c.bm), c.a5 ? (c.b5 ? "e5m2,e5m2" : "e5m2,e4m3") : (c.b5 ? "e4m3,e5m2" : "e4m3,e4m3"),
                  c.f32 ? "f32" : "bf16", int(c.bias), int(c.beta1), r.supported ? "yes" : "NO", r.max_err, r.ms,
                  r.ms > 0 ? 2.0 * M * N * K / (r.ms * 1e9) : 0.0);
    }
  }
  cublasLtDestroy(h);
  return 0;
}
