// FP8 attention (cuDNN's FP8 flash attention, backend/ops.h
// attention_fp8_forward/backward) against the bf16 attention (cuDNN's bf16
// flash attention), through the production ops, at a model's attention
// shape: causal, grouped-query. Times forward and backward alone and with
// the casts --fp8-dot-product-attention adds around them (Q, K, V and the
// output gradient quantized; the output and dQKV dequantized), and says how
// far the dequantized FP8 results are from the bf16 ones (relative to the
// bf16 tensor's max |.|: the FP8 rounding of Q, K, V, P, dS and the
// outputs). The op harness checks the FP8 op against the CPU reference;
// this program times and sanity-checks at full size.
//
//   fp8_attention_bench [--B 1] [--T 8192] [--heads 32] [--groups 8] [--hs 128] [--iters 10]
//
// The scales are calibrated as delayed scaling would set them after one
// step: each tensor's amax from a first pass, then scale = fp8_max / amax.
// TFLOP/s: causal attention FLOPs, forward 2 * 2 B H T^2 D / 2, backward 2.5x that.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "bench_util.h"

using namespace tripod;

namespace {

using bench::fill;
using bench::median_us;

// t as f32 on the host.
std::vector<float> host(backend::Backend& be, const Tensor& t) {
  Tensor f = be.empty({t.numel()}, DType::F32);
  be.cast(f, t.view({t.numel()}));
  Tensor h = Tensor::empty({t.numel()}, DType::F32);
  be.copy(h, f);
  be.synchronize();
  return std::vector<float>(h.data<float>(), h.data<float>() + t.numel());
}

// Max |a - b| / max |b| over columns [c0, c1) of rows `width` wide.
double rel_err(const std::vector<float>& a, const std::vector<float>& b, int64_t width, int64_t c0, int64_t c1) {
  double md = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const int64_t c = int64_t(i) % width;
    if (c < c0 || c >= c1) continue;
    md = std::max(md, double(std::fabs(a[i] - b[i])));
    mb = std::max(mb, double(std::fabs(b[i])));
  }
  return mb > 0 ? md / mb : md;
}

// One FP8 tensor meta: scale, scale_inv, amax (f32 scalars on the device).
struct Meta {
  Tensor scale, scale_inv, amax;
  float fp8_max;
  Meta(backend::Backend& be, float max) : fp8_max(max) {
    Tensor h = Tensor::empty({3}, DType::F32);
    h.data<float>()[0] = 1.f;
    h.data<float>()[1] = 1.f;
    h.data<float>()[2] = 0.f;
    scale = be.empty({1}, DType::F32);
    scale_inv = be.empty({1}, DType::F32);
    amax = be.empty({1}, DType::F32);
    be.copy(scale, h.narrow(0, 1));
    be.copy(scale_inv, h.narrow(1, 1));
    be.copy(amax, h.narrow(2, 1));
  }
  // scale from the amax seen so far, then the amax cleared.
  void calibrate(backend::Backend& be) {
    be.fp8_update_scale(scale, scale_inv, nullptr, amax, fp8_max, 0, false);
    be.zero(amax);
  }
};

}  // namespace

int main(int argc, char** argv) {
  int64_t B = 1, T = 8192, NH = 32, G = 8, HS = 128;
  int iters = 10;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return std::atoll(argv[++i]); };
    if (!std::strcmp(argv[i], "--B") && i + 1 < argc) B = next();
    else if (!std::strcmp(argv[i], "--T") && i + 1 < argc) T = next();
    else if (!std::strcmp(argv[i], "--heads") && i + 1 < argc) NH = next();
    else if (!std::strcmp(argv[i], "--groups") && i + 1 < argc) G = next();
    else if (!std::strcmp(argv[i], "--hs") && i + 1 < argc) HS = next();
    else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = int(next());
    else {
      std::fprintf(stderr, "usage: fp8_attention_bench [--B N] [--T N] [--heads N] [--groups N] [--hs N] [--iters N]\n");
      return 2;
    }
  }
  if (backend::cuda_device_count() == 0) {
    std::printf("fp8_attention_bench: no CUDA device, nothing to time\n");
    return 0;
  }
  auto be_ptr = backend::make_cuda_backend(0);
  backend::Backend& be = *be_ptr;
  const int64_t W = (NH + 2 * G) * HS, C = NH * HS;
  const int nh = int(NH), g = int(G);

  Tensor qkv = be.empty({B, T, W}, DType::BF16), dout = be.empty({B, T, C}, DType::BF16);
  fill(be, qkv, 2.0f);
  fill(be, dout, 0.01f);
  Tensor out = be.empty({B, T, C}, DType::BF16), lse = be.empty({B, NH, T}, DType::F32);
  Tensor dqkv = be.empty({B, T, W}, DType::BF16);

  // FP8 buffers and metas (hybrid: E4M3 forward, E5M2 gradients).
  Tensor qkv8 = be.empty({B, T, W}, DType::E4M3), out8 = be.empty({B, T, C}, DType::E4M3);
  Tensor dout8 = be.empty({B, T, C}, DType::E5M2), dqkv8 = be.empty({B, T, W}, DType::E5M2);
  Tensor out_dq = be.empty({B, T, C}, DType::BF16), dqkv_dq = be.empty({B, T, W}, DType::BF16);
  Tensor lse8 = be.empty({B, NH, T}, DType::F32);
  Meta mq(be, 448.f), ms(be, 448.f), mo(be, 448.f), mdo(be, 57344.f), mdp(be, 57344.f), mdqkv(be, 57344.f);
  backend::Fp8AttentionMeta m;
  m.qkv_scale_inv = mq.scale_inv;
  m.s_scale = ms.scale, m.s_scale_inv = ms.scale_inv, m.s_amax = ms.amax;
  m.o_scale = mo.scale, m.o_scale_inv = mo.scale_inv, m.o_amax = mo.amax;
  m.dout_scale_inv = mdo.scale_inv;
  m.dp_scale = mdp.scale, m.dp_scale_inv = mdp.scale_inv, m.dp_amax = mdp.amax;
  m.dqkv_scale = mdqkv.scale, m.dqkv_amax = mdqkv.amax;

  auto fwd8 = [&] { be.attention_fp8_forward(out8, lse8, qkv8, m, nh, g); };
  auto bwd8 = [&] { be.attention_fp8_backward(dqkv8, dout8, qkv8, out8, lse8, m, nh, g); };
  // Calibration: amaxes of Q/K/V and dO, then of S (P <= 1), O, dP, dQKV.
  be.fp8_quantize(qkv8, mq.amax, qkv, mq.scale);
  be.fp8_quantize(dout8, mdo.amax, dout, mdo.scale);
  mq.calibrate(be);
  mdo.calibrate(be);
  be.fp8_quantize(qkv8, mq.amax, qkv, mq.scale);
  be.fp8_quantize(dout8, mdo.amax, dout, mdo.scale);
  for (int round = 0; round < 2; ++round) {
    fwd8();
    bwd8();
    for (Meta* x : {&ms, &mo, &mdp, &mdqkv}) x->calibrate(be);
  }

  {  // the forward's output again after each kind of call in between (bit-equal expected)
    auto run = [&] {
      fwd8();
      be.fp8_dequantize(out_dq, out8, mo.scale_inv);
      return host(be, out_dq);
    };
    const std::vector<float> ref = run();
    std::printf("repeat:");
    for (int i = 0; i < 3; ++i) std::printf(" %.4f", rel_err(run(), ref, C, 0, C));
    be.attention_forward(out, lse, qkv, nh, g);
    std::printf(" | after bf16 fwd %.4f", rel_err(run(), ref, C, 0, C));
    be.attention_backward(dqkv, dout, qkv, out, lse, nh, g);
    std::printf(" | after bf16 bwd %.4f", rel_err(run(), ref, C, 0, C));
    bwd8();
    std::printf(" | after fp8 bwd %.4f\n", rel_err(run(), ref, C, 0, C));
  }
  // Results: bf16 against FP8 (dequantized).
  be.attention_forward(out, lse, qkv, nh, g);
  be.attention_backward(dqkv, dout, qkv, out, lse, nh, g);
  fwd8();
  bwd8();
  be.fp8_dequantize(out_dq, out8, mo.scale_inv);
  be.fp8_dequantize(dqkv_dq, dqkv8, mdqkv.scale_inv);
  const std::vector<float> o_got = host(be, out_dq), o_ref = host(be, out), l_got = host(be, lse8),
                           l_ref = host(be, lse), d_got = host(be, dqkv_dq), d_ref = host(be, dqkv);
  const double e_out = rel_err(o_got, o_ref, C, 0, C), e_lse = rel_err(l_got, l_ref, T, 0, T);
  const double e_dq = rel_err(d_got, d_ref, W, 0, C), e_dk = rel_err(d_got, d_ref, W, C, C + G * HS);
  const double e_dv = rel_err(d_got, d_ref, W, C + G * HS, W);
  for (int64_t b = 0; b < B && B > 1; ++b) {  // per batch row
    auto part = [&](const std::vector<float>& v) {
      const size_t n = v.size() / size_t(B);
      return std::vector<float>(v.begin() + long(b * n), v.begin() + long((b + 1) * n));
    };
    std::printf("batch %lld: out %.4f  lse %.2e  dQKV %.4f\n", (long long)b, rel_err(part(o_got), part(o_ref), C, 0, C),
                rel_err(part(l_got), part(l_ref), T, 0, T), rel_err(part(d_got), part(d_ref), W, 0, W));
  }
  {  // the calibrated scales against fp8_max / max |bf16 tensor| (what they should be)
    auto mx = [](const std::vector<float>& v, int64_t width, int64_t c0, int64_t c1) {
      double m = 0;
      for (size_t i = 0; i < v.size(); ++i)
        if (int64_t(i) % width >= c0 && int64_t(i) % width < c1) m = std::max(m, double(std::fabs(v[i])));
      return m;
    };
    auto sc = [&](const Meta& x) { return host(be, x.scale)[0]; };
    std::printf("scales: s %.4g  o %.4g (448/max|out| %.4g)  dp %.4g  dqkv %.4g (57344/max|dqkv| %.4g)\n", sc(ms),
                sc(mo), 448.0 / mx(o_ref, C, 0, C), sc(mdp), sc(mdqkv), 57344.0 / mx(d_ref, W, 0, W));
  }
  std::printf("fp8_attention_bench B=%lld T=%lld heads=%lld groups=%lld HS=%lld (%s)\n", (long long)B, (long long)T,
              (long long)NH, (long long)G, (long long)HS, be.name().c_str());
  std::printf("FP8 against bf16 (max |diff| / max |bf16|): out %.4f  lse %.2e  dQ %.4f  dK %.4f  dV %.4f\n", e_out,
              e_lse, e_dq, e_dk, e_dv);

  const double f_fwd = 2.0 * 2.0 * double(B * NH) * double(T) * double(T) * double(HS) / 2.0, f_bwd = 2.5 * f_fwd;
  const double t_fwd = median_us(be, [&] { be.attention_forward(out, lse, qkv, nh, g); }, iters);
  const double t_bwd = median_us(be, [&] { be.attention_backward(dqkv, dout, qkv, out, lse, nh, g); }, iters);
  const double t_fwd8 = median_us(be, fwd8, iters), t_bwd8 = median_us(be, bwd8, iters);
  const double t_fwd8c = median_us(be, [&] {
    be.fp8_quantize(qkv8, mq.amax, qkv, mq.scale);
    fwd8();
    be.fp8_dequantize(out_dq, out8, mo.scale_inv);
  }, iters);
  const double t_bwd8c = median_us(be, [&] {
    be.fp8_quantize(dout8, mdo.amax, dout, mdo.scale);
    bwd8();
    be.fp8_dequantize(dqkv_dq, dqkv8, mdqkv.scale_inv);
  }, iters);
  auto tf = [](double flops, double us) { return flops / us * 1e-6; };
  std::printf("| pass | bf16 us | bf16 TFLOP/s | FP8 us | FP8 TFLOP/s | FP8 + casts us | bf16 / (FP8 + casts) |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  std::printf("| forward | %.0f | %.0f | %.0f | %.0f | %.0f | %.2f |\n", t_fwd, tf(f_fwd, t_fwd), t_fwd8,
              tf(f_fwd, t_fwd8), t_fwd8c, t_fwd / t_fwd8c);
  std::printf("| backward | %.0f | %.0f | %.0f | %.0f | %.0f | %.2f |\n", t_bwd, tf(f_bwd, t_bwd), t_bwd8,
              tf(f_bwd, t_bwd8), t_bwd8c, t_bwd / t_bwd8c);
  std::printf("| both | %.0f | | %.0f | | %.0f | %.2f |\n", t_fwd + t_bwd, t_fwd8 + t_bwd8, t_fwd8c + t_bwd8c,
              (t_fwd + t_bwd) / (t_fwd8c + t_bwd8c));
  return 0;
}
