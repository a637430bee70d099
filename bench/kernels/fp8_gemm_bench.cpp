// FP8 GEMM against bf16 GEMM at the model shapes, through the production
// ops (fp8_matmul against matmul_forward / matmul_backward, both cuBLASLt),
// in the three orientations of a linear layer (y = x W^T, dx = dy W,
// dW += dy^T x), plus the FP8 casts that feed them. Correctness is
// tests/backend_ops' job (test_backend_ops_gpu --gtest_filter='*fp8*');
// this program only times. Each row: 3 warm-up calls, then 5 repeats of
// `iters` calls between stream synchronisations; the median per call, with
// TFLOP/s = 2 M N K / time (GEMMs) or GB/s of bytes read + written (casts).
// The PyTorch peer at the same shapes is bench/fp8_gemm_torch.py.
//
//   fp8_gemm_bench [--model gpt2-1.5b|llama3-8b|all] [--iters N] [--out results.md]
//
// Shapes: GPT-2 1.5B (N = 16 x 1024 rows, C = 1600, F = 4C = 6400: qkv,
// proj, fc1, fc2) and a Llama 3 8B layer (N = 8192, C = 4096, qkv 6144 =
// (32 + 2 x 8) x 128, F = 14336, fc1 2F for SwiGLU). fp8_matmul runs with
// f32 accumulation promoted per MMA block (cuBLASLt fast accumulation off);
// the "fast" column times the same GEMM with fast accumulation on
// (cuda::Fp8Gemm directly: Transformer Engine's choice for the forward).
// Forward and dgrad write bf16, wgrad accumulates into an f32 gradient as
// the bf16 path does.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/fp8.cuh"
#include "base/timer.h"
#include "bench_util.h"

using namespace tripod;

namespace {

using bench::fill;
using bench::median_us;

Tensor scalar(backend::Backend& be, float v) {
  Tensor h = Tensor::empty({1}, DType::F32);
  h.data<float>()[0] = v;
  Tensor d = be.empty({1}, DType::F32);
  be.copy(d, h);
  return d;
}

struct Gemm {
  const char* name;
  int64_t in, out;  // the layer's C_in (K of the forward) and C_out (OC)
};
struct Model {
  const char* name;
  int64_t N;
  std::vector<Gemm> gemms;
};

struct Row {
  std::string model, gemm, orient, shape;
  double bf16_us, fp8_us, fast_us, flops;
};

}  // namespace

int main(int argc, char** argv) {
  std::string which = "all", out_path;
  int iters = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--model") && i + 1 < argc) which = argv[++i];
    else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: fp8_gemm_bench [--model gpt2-1.5b|llama3-8b|all] [--iters N] [--out FILE]\n");
      return 2;
    }
  }
  if (backend::cuda_device_count() == 0) {
    std::printf("fp8_gemm_bench: no CUDA device, nothing to time\n");
    return 0;
  }
  const std::vector<Model> models = {
      {"gpt2-1.5b", 16 * 1024, {{"qkv", 1600, 4800}, {"proj", 1600, 1600}, {"fc1", 1600, 6400}, {"fc2", 6400, 1600}}},
      {"llama3-8b", 8192, {{"qkv", 4096, 6144}, {"proj", 4096, 4096}, {"fc1", 4096, 28672}, {"fc2", 14336, 4096}}}};
  auto be = backend::make_cuda_backend(0);
  std::printf("device %s, %d iterations per repeat\n", be->name().c_str(), iters);
  std::printf("%-10s %-5s %-6s %-22s %10s %9s %10s %9s %7s %10s %9s\n", "model", "gemm", "orient", "M x N x K",
              "bf16 us", "TFLOP/s", "fp8 us", "TFLOP/s", "ratio", "fast us", "TFLOP/s");
  backend::cuda::Fp8Gemm fast_gemm;  // the fast-accumulation column
  auto* stream = static_cast<cudaStream_t>(be->native_stream());
  std::vector<Row> rows;
  std::vector<std::string> casts;
  Tensor one = scalar(*be, 1.f), s_x = scalar(*be, 16.f), s_inv = scalar(*be, 1.f / 16.f);
  Tensor amax = be->empty({1}, DType::F32);
  be->zero(amax);
  for (const Model& m : models) {
    if (which != "all" && which != m.name) continue;
    const int64_t N = m.N;
    for (const Gemm& g : m.gemms) {
      const int64_t C = g.in, OC = g.out;
      // bf16 operands and outputs.
      Tensor x = be->empty({N, C}, DType::BF16), w = be->empty({OC, C}, DType::BF16);
      Tensor y = be->empty({N, OC}, DType::BF16), dy = be->empty({N, OC}, DType::BF16);
      Tensor dx = be->empty({N, C}, DType::BF16), dw = be->empty({OC, C}, DType::F32);
      fill(*be, x, 1.f);
      fill(*be, w, 0.02f);
      fill(*be, dy, 1e-3f);
      be->zero(dw);
      // FP8 copies: x, W (E4M3) and dy (E5M2), each with its transpose.
      Tensor x8 = be->empty({N, C}, DType::E4M3), x8t = be->empty({C, N}, DType::E4M3);
      Tensor w8 = be->empty({OC, C}, DType::E4M3), w8t = be->empty({C, OC}, DType::E4M3);
      Tensor dy8 = be->empty({N, OC}, DType::E5M2), dy8t = be->empty({OC, N}, DType::E5M2);
      be->fp8_cast_transpose(x8, x8t, amax, x, s_x);
      be->fp8_cast_transpose(w8, w8t, amax, w, s_x);
      be->fp8_cast_transpose(dy8, dy8t, amax, dy, s_x);
      // out (M, Nn) (+)= a (M, K) b (Nn, K)^T in FP8, with fast accumulation.
      auto fast = [&](Tensor& out, const Tensor& a, const Tensor& b, bool acc) {
        return [&, o = &out, pa = &a, pb = &b, acc] {
          if (!fast_gemm.run(o->raw(), o->dtype(), pa->raw(), pa->dtype(), s_inv.data<float>(), pb->raw(),
                             pb->dtype(), s_inv.data<float>(), nullptr, acc, pa->size(0), pa->size(1), pb->size(0),
                             stream, true))
            std::fprintf(stderr, "fp8_gemm_bench: cuBLASLt took no fast-accumulation GEMM\n");
        };
      };
      struct O { const char* orient; int64_t M, Nn, K; std::function<void()> bf16, fp8, fp8_fast; };
      const std::vector<O> orients = {
          {"fwd", N, OC, C, [&] { be->matmul_forward(y, x, w, nullptr); },
           [&] { be->fp8_matmul(y, x8, s_inv, w8, s_inv); }, fast(y, x8, w8, false)},
          {"dgrad", N, C, OC, [&] { be->matmul_backward(&dx, nullptr, nullptr, dy, x, w); },
           [&] { be->fp8_matmul(dx, dy8, s_inv, w8t, s_inv); }, fast(dx, dy8, w8t, false)},
          {"wgrad", OC, C, N, [&] { be->matmul_backward(nullptr, &dw, nullptr, dy, x, w); },
           [&] { be->fp8_matmul(dw, dy8t, s_inv, x8t, s_inv, nullptr, true); }, fast(dw, dy8t, x8t, true)}};
      for (const O& o : orients) {
        const double flops = 2.0 * double(o.M) * double(o.Nn) * double(o.K);
        const double tb = median_us(*be, o.bf16, iters), tf = median_us(*be, o.fp8, iters);
        const double tq = median_us(*be, o.fp8_fast, iters);
        const std::string shape = std::to_string(o.M) + " x " + std::to_string(o.Nn) + " x " + std::to_string(o.K);
        rows.push_back({m.name, g.name, o.orient, shape, tb, tf, tq, flops});
        std::printf("%-10s %-5s %-6s %-22s %10.1f %9.1f %10.1f %9.1f %6.2fx %10.1f %9.1f\n", m.name, g.name,
                    o.orient, shape.c_str(), tb, flops / tb * 1e-6, tf, flops / tf * 1e-6, tb / tf, tq,
                    flops / tq * 1e-6);
        std::fflush(stdout);
      }
      // The casts that feed these GEMMs (bytes: bf16 read + FP8 written once or twice).
      if (g.name == std::string("qkv") || g.name == std::string("fc2")) {
        const double tq = median_us(*be, [&] { be->fp8_quantize(x8, amax, x, s_x); }, iters);
        const double tt = median_us(*be, [&] { be->fp8_cast_transpose(x8, x8t, amax, x, s_x); }, iters);
        const double n = double(N) * double(C);
        char line[256];
        std::snprintf(line, sizeof line, "| %s | (%lld, %lld) bf16 | %.1f us, %.0f GB/s | %.1f us, %.0f GB/s |", m.name,
                      (long long)N, (long long)C, tq, 3 * n / tq * 1e-3, tt, 4 * n / tt * 1e-3);
        casts.push_back(line);
        std::printf("casts %s\n", line);
      }
    }
  }
  if (!out_path.empty()) {
    FILE* f = std::fopen(out_path.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "fp8_gemm_bench: cannot write %s\n", out_path.c_str());
      return 1;
    }
    std::fprintf(f, "device %s\n\n| model | gemm | orientation | M x N x K | bf16 us | bf16 TFLOP/s | fp8 us | fp8 TFLOP/s "
                    "| fp8 / bf16 | fp8 fast-accum TFLOP/s |\n|---|---|---|---|---|---|---|---|---|---|\n",
                 be->name().c_str());
    for (const Row& r : rows)
      std::fprintf(f, "| %s | %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.2fx | %.1f |\n", r.model.c_str(),
                   r.gemm.c_str(), r.orient.c_str(), r.shape.c_str(), r.bf16_us, r.flops / r.bf16_us * 1e-6, r.fp8_us,
                   r.flops / r.fp8_us * 1e-6, r.bf16_us / r.fp8_us, r.flops / r.fast_us * 1e-6);
    std::fprintf(f, "\n| model | input | fp8_quantize | fp8_cast_transpose |\n|---|---|---|---|\n");
    for (const std::string& c : casts) std::fprintf(f, "%s\n", c.c_str());
    std::fclose(f);
  }
  return 0;
}
