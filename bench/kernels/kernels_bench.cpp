// Kernel timings of the CUDA backend at GPT-2 shapes (llm.c dev/cuda spirit,
// but it links the production backend, so lab and trainer cannot drift).
// Correctness is checked by tests/backend_ops (run it first: gpu_check.sh
// does); this program only times. Each op: 3 warm-up calls, then 5 repeats
// of `iters` calls between stream synchronisations; the median per-call time
// is reported with achieved TFLOP/s (matmul, attention) or GB/s (bytes each
// call must read + write at least once).
//
//   kernels_bench [--model 124m|350m|1.5b] [--batch B] [--only SECTION] [--out results.md]
// SECTION: matmul, attention, attention_shapes, layernorm, gelu, embedding, ce,
// optimizer (default: all; optimizer times a parameter vector of the
// --model's size: 124M, 355M or 1.56B elements); llama (opt-in: RMSNorm, SwiGLU, RoPE and
// grouped-query attention at Llama-style shapes, bf16). attention_shapes: bf16 causal attention at
// B*T = 8192 with (T, NH, HS) = (1024, 12, 64), (1024, 25, 64), (2048, 16, 128).
//   kernels_bench --attn-io DIR B T NH HS
// runs one bf16 attention forward + backward on DIR/qkv.bin (B*T*3C bf16) and
// DIR/dout.bin (B*T*C bf16) and writes DIR/out.bin, DIR/lse.bin (f32) and
// DIR/dqkv.bin, for scripts/attention_torch_bench.py to check against PyTorch.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "base/timer.h"
#include "bench_util.h"

using namespace tripod;

namespace {

using bench::fill;
using bench::median_us;

struct Row {
  std::string op, dtype, shape;
  double us, tflops, gbs;
};

bool read_into(backend::Backend& be, Tensor& dst, const std::string& path) {
  Tensor h = Tensor::empty(dst.shape(), dst.dtype());
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  size_t n = std::fread(h.raw(), 1, h.nbytes(), f);
  std::fclose(f);
  if (n != h.nbytes()) return false;
  be.copy(dst, h);
  return true;
}

bool write_from(backend::Backend& be, const Tensor& src, const std::string& path) {
  Tensor h = Tensor::empty(src.shape(), src.dtype());
  be.copy(h, src);
  be.synchronize();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  size_t n = std::fwrite(h.raw(), 1, h.nbytes(), f);
  std::fclose(f);
  return n == h.nbytes();
}

int attention_io(const std::string& dir, int64_t B, int64_t T, int64_t NH, int64_t HS) {
  auto be = backend::make_cuda_backend(0);
  const int64_t C = NH * HS;
  Tensor qkv = be->empty({B, T, 3 * C}, DType::BF16), dout = be->empty({B, T, C}, DType::BF16);
  Tensor o = be->empty({B, T, C}, DType::BF16), lse = be->empty({B, NH, T}, DType::F32);
  Tensor dqkv = be->empty({B, T, 3 * C}, DType::BF16);
  if (!read_into(*be, qkv, dir + "/qkv.bin") || !read_into(*be, dout, dir + "/dout.bin")) {
    std::fprintf(stderr, "kernels_bench --attn-io: cannot read %s/qkv.bin or dout.bin of the given shape\n", dir.c_str());
    return 1;
  }
  be->attention_forward(o, lse, qkv, static_cast<int>(NH));
  be->attention_backward(dqkv, dout, qkv, o, lse, static_cast<int>(NH));
  bool ok = write_from(*be, o, dir + "/out.bin") && write_from(*be, lse, dir + "/lse.bin") &&
            write_from(*be, dqkv, dir + "/dqkv.bin");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "124m", out_path, only;
  int64_t B = 8;
  if (argc == 7 && !std::strcmp(argv[1], "--attn-io"))
    return attention_io(argv[2], std::atoll(argv[3]), std::atoll(argv[4]), std::atoll(argv[5]), std::atoll(argv[6]));
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
    else if (!std::strcmp(argv[i], "--batch") && i + 1 < argc) B = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
  }
  if (backend::cuda_device_count() == 0) {
    std::printf("kernels_bench: no CUDA device, nothing to time\n");
    return 0;
  }
  int64_t C = 768, NH = 12;
  if (model == "350m") C = 1024, NH = 16;
  if (model == "1.5b") C = 1600, NH = 25;
  const int64_t T = 1024, N = B * T, V = 50304, HS = C / NH;
  auto be = backend::make_cuda_backend(0);
  auto want = [&](const char* section) { return only.empty() || only == section; };
  const bool want_attention_shapes = only == "attention_shapes", want_llama = only == "llama";
  std::vector<Row> rows;
  auto add = [&](std::string op, DType dt, std::string shape, double us, double flops, double bytes) {
    rows.push_back({std::move(op), dtype_name(dt), std::move(shape), us,
                    flops > 0 ? flops / us * 1e-6 : 0, bytes > 0 ? bytes / us * 1e-3 : 0});
    const Row& r = rows.back();
    std::printf("%-26s %-5s %-24s %10.1f us %8.1f TFLOP/s %8.0f GB/s\n", r.op.c_str(), r.dtype.c_str(),
                r.shape.c_str(), r.us, r.tflops, r.gbs);
    std::fflush(stdout);
  };
  std::printf("device %s, GPT-2 %s: B=%lld T=%lld C=%lld NH=%lld HS=%lld V=%lld\n", be->name().c_str(),
              model.c_str(), (long long)B, (long long)T, (long long)C, (long long)NH, (long long)HS,
              (long long)V);

  // Matmul ceiling through the same cuBLASLt path.
  if (want("matmul")) {
    const int64_t S = 8192;
    Tensor a = be->empty({S, S}, DType::BF16), w = be->empty({S, S}, DType::BF16), o = be->empty({S, S}, DType::BF16);
    fill(*be, a, 1.f);
    fill(*be, w, 1.f);
    double us = median_us(*be, [&] { be->matmul_forward(o, a, w, nullptr); }, 5);
    add("matmul_ceiling", DType::BF16, "8192^3", us, 2.0 * S * S * S, 0);
  }

  for (DType dt : {DType::BF16, DType::F32}) {
    const double es = static_cast<double>(dtype_size(dt));
    auto shp = [](std::initializer_list<int64_t> d) {
      std::string s;
      for (int64_t x : d) {  // piece by piece: GCC 12 warns (-Wrestrict) on "x" + string
        if (!s.empty()) s += 'x';
        s += std::to_string(x);
      }
      return s;
    };
    // Linear layers of one block and the LM head.
    struct Lin { const char* name; int64_t c, oc; bool bias; };
    for (Lin l : want("matmul") ? std::vector<Lin>{Lin{"qkv", C, 3 * C, true}, Lin{"attn_proj", C, C, true}, Lin{"fc", C, 4 * C, true},
                  Lin{"fc_proj", 4 * C, C, true}, Lin{"lm_head", C, V, false}} : std::vector<Lin>{}) {
      Tensor x = be->empty({N, l.c}, dt), w = be->empty({l.oc, l.c}, dt), b = be->empty({l.oc}, dt);
      Tensor y = be->empty({N, l.oc}, dt), dx = be->empty({N, l.c}, dt);
      Tensor dw = be->empty({l.oc, l.c}, DType::F32), db = be->empty({l.oc}, DType::F32);
      for (Tensor* t : {&x, &w, &b, &y}) fill(*be, *t);
      be->zero(dw);
      be->zero(db);
      double f = 2.0 * N * l.c * l.oc;
      double us = median_us(*be, [&] { be->matmul_forward(y, x, w, l.bias ? &b : nullptr); }, 10);
      add(std::string("matmul_fwd_") + l.name, dt, shp({N, l.c, l.oc}), us, f, 0);
      us = median_us(*be, [&] { be->matmul_backward(&dx, &dw, l.bias ? &db : nullptr, y, x, w); }, 10);
      add(std::string("matmul_bwd_") + l.name, dt, shp({N, l.c, l.oc}), us, 2 * f, 0);
    }
    // Attention (causal): forward 2 matmuls of B*NH*T*T/2*HS MACs.
    if (want("attention")) {
      Tensor qkv = be->empty({B, T, 3 * C}, dt), o = be->empty({B, T, C}, dt), dout = be->empty({B, T, C}, dt);
      Tensor lse = be->empty({B, NH, T}, DType::F32), dqkv = be->empty({B, T, 3 * C}, dt);
      fill(*be, qkv, 1.f);
      fill(*be, dout, 1.f);
      double f = 4.0 * B * NH * T * T * HS / 2;
      double us = median_us(*be, [&] { be->attention_forward(o, lse, qkv, static_cast<int>(NH)); }, 3);
      add("attention_fwd", dt, shp({B, T, NH, HS}), us, f, 0);
      us = median_us(*be, [&] { be->attention_backward(dqkv, dout, qkv, o, lse, static_cast<int>(NH)); }, 3);
      add("attention_bwd", dt, shp({B, T, NH, HS}), us, 2.5 * f, 0);
    }
    // Attention at the shapes of the PyTorch comparison (bf16 only; opt-in section).
    struct AttnShape { int64_t b, t, nh, hs; };
    for (AttnShape a : want_attention_shapes && dt == DType::BF16
                           ? std::vector<AttnShape>{{8, 1024, 12, 64}, {8, 1024, 25, 64}, {4, 2048, 16, 128}}
                           : std::vector<AttnShape>{}) {
      const int64_t c = a.nh * a.hs;
      Tensor qkv = be->empty({a.b, a.t, 3 * c}, dt), o = be->empty({a.b, a.t, c}, dt), dout = be->empty({a.b, a.t, c}, dt);
      Tensor lse = be->empty({a.b, a.nh, a.t}, DType::F32), dqkv = be->empty({a.b, a.t, 3 * c}, dt);
      fill(*be, qkv, 1.f);
      fill(*be, dout, 1.f);
      double f = 4.0 * a.b * a.nh * a.t * a.t * a.hs / 2;
      double us = median_us(*be, [&] { be->attention_forward(o, lse, qkv, static_cast<int>(a.nh)); }, 10);
      add("attention_fwd", dt, shp({a.b, a.t, a.nh, a.hs}), us, f, 0);
      us = median_us(*be, [&] { be->attention_backward(dqkv, dout, qkv, o, lse, static_cast<int>(a.nh)); }, 10);
      add("attention_bwd", dt, shp({a.b, a.t, a.nh, a.hs}), us, 2.5 * f, 0);
    }
    // The Llama-family ops at a Llama-style ~1B shape (hidden 2048, 32 query
    // heads in 8 groups of HS 64, ffn 5632, T 2048; bf16 only; opt-in
    // section "llama"), and grouped-query attention at HS 128 (Llama 8B heads).
    if (want_llama && dt == DType::BF16) {
      const int64_t LT = 2048, LN = B * LT, LC = 2048, LF = 5632, LNH = 32, LG = 8;
      Tensor x = be->empty({LN, LC}, dt), y = be->empty({LN, LC}, dt), dx = be->empty({LN, LC}, dt);
      Tensor w = be->empty({LC}, DType::F32), dw = be->empty({LC}, DType::F32), rstd = be->empty({LN}, DType::F32);
      for (Tensor* t : {&x, &y, &w}) fill(*be, *t, 1.f);
      be->zero(dx);
      be->zero(dw);
      const double nc = double(LN) * LC * es;
      double us = median_us(*be, [&] { be->rmsnorm_forward(y, rstd, x, w, 1e-5f); }, 20);
      add("rmsnorm_fwd", dt, shp({LN, LC}), us, 0, 2 * nc);
      us = median_us(*be, [&] { be->rmsnorm_backward(dx, dw, y, x, w, rstd); }, 20);
      add("rmsnorm_bwd", dt, shp({LN, LC}), us, 0, 4 * nc);
      us = median_us(*be, [&] { be->fused_residual_rmsnorm_forward(dx, y, rstd, x, dx, w, 1e-5f); }, 20);
      add("fused_residual_rmsnorm", dt, shp({LN, LC}), us, 0, 4 * nc);
      Tensor g = be->empty({LN, 2 * LF}, dt), h = be->empty({LN, LF}, dt), dg = be->empty({LN, 2 * LF}, dt);
      fill(*be, g, 1.f);
      fill(*be, h, 1.f);
      const double nf = double(LN) * LF * es;
      us = median_us(*be, [&] { be->swiglu_forward(h, g); }, 20);
      add("swiglu_fwd", dt, shp({LN, LF}), us, 0, 3 * nf);
      us = median_us(*be, [&] { be->swiglu_backward(dg, g, h); }, 20);
      add("swiglu_bwd", dt, shp({LN, LF}), us, 0, 5 * nf);
      for (int64_t hs : {int64_t(64), int64_t(128)}) {
        const int64_t W = (LNH + 2 * LG) * hs, c = LNH * hs, lb = hs == 64 ? B : B / 2 > 0 ? B / 2 : 1;
        Tensor qkv = be->empty({lb, LT, W}, dt), o = be->empty({lb, LT, c}, dt), dout = be->empty({lb, LT, c}, dt);
        Tensor lse = be->empty({lb, LNH, LT}, DType::F32), dqkv = be->empty({lb, LT, W}, dt);
        fill(*be, qkv, 1.f);
        fill(*be, dout, 1.f);
        const double qk = double(lb) * LT * (LNH + LG) * hs * es;  // the rotated Q and K heads
        us = median_us(*be, [&] { be->rope_forward(qkv, int(LNH), int(LG), hs, 10000.f); }, 20);
        add("rope_fwd", dt, shp({lb, LT, LNH, LG, hs}), us, 0, 2 * qk);
        us = median_us(*be, [&] { be->rope_backward(qkv, int(LNH), int(LG), hs, 10000.f); }, 20);
        add("rope_bwd", dt, shp({lb, LT, LNH, LG, hs}), us, 0, 2 * qk);
        const double f = 4.0 * lb * LNH * LT * LT * hs / 2;
        us = median_us(*be, [&] { be->attention_forward(o, lse, qkv, int(LNH), int(LG)); }, 5);
        add("attention_gqa_fwd", dt, shp({lb, LT, LNH, LG, hs}), us, f, 0);
        us = median_us(*be, [&] { be->attention_backward(dqkv, dout, qkv, o, lse, int(LNH), int(LG)); }, 5);
        add("attention_gqa_bwd", dt, shp({lb, LT, LNH, LG, hs}), us, 2.5 * f, 0);
      }
    }
    // Memory-bound ops: bytes = each input read once + each output written once.
    if (want("layernorm")) {
      Tensor x = be->empty({N, C}, dt), y = be->empty({N, C}, dt), dx = be->empty({N, C}, dt);
      Tensor w = be->empty({C}, dt), b = be->empty({C}, dt), mean = be->empty({N}, DType::F32),
             rstd = be->empty({N}, DType::F32), dw = be->empty({C}, DType::F32), db = be->empty({C}, DType::F32);
      for (Tensor* t : {&x, &y, &w, &b}) fill(*be, *t, 1.f);
      be->zero(dx);
      be->zero(dw);
      be->zero(db);
      double nc = double(N) * C * es;
      double us = median_us(*be, [&] { be->layernorm_forward(y, mean, rstd, x, w, b, 1e-5f); }, 20);
      add("layernorm_fwd", dt, shp({N, C}), us, 0, 2 * nc);
      us = median_us(*be, [&] { be->layernorm_backward(dx, dw, db, y, x, w, mean, rstd); }, 20);
      add("layernorm_bwd", dt, shp({N, C}), us, 0, 4 * nc);
      us = median_us(*be, [&] { be->add(y, x, dx); }, 20);
      add("residual_add", dt, shp({N, C}), us, 0, 3 * nc);
    }
    if (want("gelu")) {
      Tensor x = be->empty({N, 4 * C}, dt), y = be->empty({N, 4 * C}, dt), dx = be->empty({N, 4 * C}, dt);
      fill(*be, x, 1.f);
      fill(*be, y, 1.f);
      double nc = double(N) * 4 * C * es;
      double us = median_us(*be, [&] { be->gelu_forward(y, x); }, 20);
      add("gelu_fwd", dt, shp({N, 4 * C}), us, 0, 2 * nc);
      us = median_us(*be, [&] { be->gelu_backward(dx, x, y); }, 20);
      add("gelu_bwd", dt, shp({N, 4 * C}), us, 0, 3 * nc);
    }
    if (want("embedding")) {
      Tensor tok = be->empty({B, T}, DType::I32), wte = be->empty({V, C}, dt), wpe = be->empty({T, C}, dt);
      Tensor out = be->empty({B, T, C}, dt), dwte = be->empty({V, C}, DType::F32), dwpe = be->empty({T, C}, DType::F32);
      {
        Tensor h = Tensor::empty({B, T}, DType::I32);
        for (int64_t i = 0; i < B * T; ++i) h.data<int32_t>()[i] = static_cast<int32_t>((i * 7919) % V);
        be->copy(tok, h);
      }
      fill(*be, wte);
      fill(*be, wpe);
      be->zero(dwte);
      be->zero(dwpe);
      double nc = double(N) * C * es;
      double us = median_us(*be, [&] { be->embedding_forward(out, tok, wte, &wpe, 0); }, 20);
      add("embedding_fwd", dt, shp({N, C}), us, 0, 3 * nc);
      us = median_us(*be, [&] { be->embedding_backward(&dwte, &dwpe, out, tok, 0); }, 20);
      add("embedding_bwd (f32 grads)", dt, shp({N, C}), us, 0, nc + 8.0 * N * C);
    }
    if (want("ce")) {
      Tensor logits = be->empty({N, V}, dt), dlogits = be->empty({N, V}, dt);
      Tensor mx = be->empty({N}, DType::F32), sums = be->empty({2, N}, DType::F32), loss = be->empty({N}, DType::F32);
      Tensor tg = be->empty({N}, DType::I32);
      fill(*be, logits, 4.f);
      be->zero(tg);
      double nv = double(N) * V * es;
      double us = median_us(*be, [&] {
        be->ce_row_max(mx, logits);
        be->ce_row_sums(sums, logits, mx, tg, 0);
        be->ce_loss(loss, sums, mx);
      }, 5);
      add("ce_forward(3 steps)", dt, shp({N, V}), us, 0, 2 * nv);
      us = median_us(*be, [&] { be->ce_backward(dlogits, logits, mx, sums, tg, 0, 1.f / N); }, 5);
      add("ce_backward", dt, shp({N, V}), us, 0, 2 * nv);
    }
  }
  // Optimizer over a GPT-2-sized parameter vector (f32 state; the parameter
  // counts of GPT-2 124M / 350M / 1.5B at V = 50257): the update, the grad
  // norm, the bf16 compute-copy cast, and the update then the cast (the
  // unfused mixed-precision step) against the update writing the copy in its
  // own pass (adamw_update with a compute_out). GB/s counts the bytes each
  // form must move: 28 per parameter for the update, 6 for the cast, 34 for
  // both, 30 for the fused pass.
  if (want("optimizer")) {
    const int64_t P = model == "1.5b" ? 1557611200 : model == "350m" ? 354823168 : 124439808;
    Tensor p = be->empty({P}, DType::F32), g = be->empty({P}, DType::F32), m = be->empty({P}, DType::F32),
           v = be->empty({P}, DType::F32), acc = be->empty({1}, DType::F32);
    for (Tensor* t : {&p, &g}) fill(*be, *t);
    be->zero(m);
    be->zero(v);
    be->zero(acc);
    backend::AdamWStep s;
    s.lr = 1e-4f;
    const std::string n = std::to_string(P);
    double us = median_us(*be, [&] { be->adamw_update(p, g, m, v, s); }, 5);
    add("adamw_update", DType::F32, n, us, 0, 28.0 * P);
    us = median_us(*be, [&] { be->sum_squares(acc, g); }, 5);
    add("sum_squares", DType::F32, n, us, 0, 4.0 * P);
    Tensor h = be->empty({P}, DType::BF16);
    us = median_us(*be, [&] { be->cast(h, p); }, 5);
    add("cast f32->bf16", DType::F32, n, us, 0, 6.0 * P);
    us = median_us(*be, [&] {
      be->adamw_update(p, g, m, v, s);
      be->cast(h, p);
    }, 5);
    add("adamw_update + cast bf16 (unfused)", DType::F32, n, us, 0, 34.0 * P);
    us = median_us(*be, [&] { be->adamw_update(p, g, m, v, s, &h); }, 5);
    add("adamw_update -> bf16 copy (fused)", DType::F32, n, us, 0, 30.0 * P);
  }
  std::printf("peak device memory %.2f GiB\n", be->peak_memory_bytes() / 1073741824.0);

  if (!out_path.empty()) {
    FILE* f = std::fopen(out_path.c_str(), "w");
    if (f) {
      std::fprintf(f, "| op | dtype | shape | us | TFLOP/s | GB/s |\n|---|---|---|---|---|---|\n");
      for (const Row& r : rows)
        std::fprintf(f, "| %s | %s | %s | %.1f | %s | %s |\n", r.op.c_str(), r.dtype.c_str(), r.shape.c_str(),
                     r.us, r.tflops > 0 ? std::to_string(r.tflops).substr(0, 6).c_str() : "",
                     r.gbs > 0 ? std::to_string(static_cast<int>(r.gbs)).c_str() : "");
      std::fclose(f);
    }
  }
  return 0;
}
