// Implementation of adamw_compute_out_mismatch and fp8_swiglu_cast_mismatch
// (harness.h): the fused call and the unfused sequence on twin buffers
// filled with the same values, compared byte for byte on the host.
#include <cstring>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "harness.h"

namespace tripod::testing {
namespace {

Tensor upload_f32(backend::Backend& be, const std::vector<float>& v) {
  const int64_t n = static_cast<int64_t>(v.size());
  Tensor h = Tensor::empty({n}, DType::F32);
  std::memcpy(h.raw(), v.data(), v.size() * sizeof(float));
  Tensor d = be.empty({n}, DType::F32);
  be.copy(d, h);
  return d;
}

Tensor to_host_raw(backend::Backend& be, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  be.copy(h, t);
  be.synchronize();
  return h;
}

// "" when equal, else the count and first index of differing elements.
std::string diff(const char* name, const Tensor& a, const Tensor& b) {
  const size_t es = dtype_size(a.dtype());
  const auto* pa = static_cast<const unsigned char*>(a.raw());
  const auto* pb = static_cast<const unsigned char*>(b.raw());
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(pa + i * es, pb + i * es, es) != 0) {
      if (first < 0) first = i;
      ++bad;
    }
  return bad ? fmt::format("{}: {} of {} elements differ, first at {}\n", name, bad, a.numel(), first) : "";
}

}  // namespace

std::string adamw_compute_out_mismatch(backend::Backend& be, DType compute, int64_t n, int64_t offset,
                                       uint64_t seed) {
  const int64_t total = offset + n + 3;  // untouched elements on both sides
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> p(total), g(total), m(total), v(total);
  for (int64_t i = 0; i < total; ++i) {
    p[i] = normal(rng);
    g[i] = 0.1f * normal(rng);
    m[i] = 0.01f * normal(rng);
    v[i] = 1e-4f * std::abs(normal(rng));
  }
  // Twin buffers: [0] the unfused sequence, [1] the fused call.
  Tensor P[2], G[2], M[2], V[2], C[2];
  for (int k = 0; k < 2; ++k) {
    P[k] = upload_f32(be, p), G[k] = upload_f32(be, g), M[k] = upload_f32(be, m), V[k] = upload_f32(be, v);
    C[k] = be.empty({total}, compute);
    be.zero(C[k]);
  }
  backend::AdamWStep s;
  s.lr = 3e-3f;
  s.weight_decay = 0.1f;
  s.grad_scale = 0.75f;
  for (int64_t step = 1; step <= 3; ++step) {
    s.step = step;
    for (int k = 0; k < 2; ++k) {
      Tensor pv = P[k].flat(offset, {n}), gv = G[k].flat(offset, {n}), mv = M[k].flat(offset, {n}),
             vv = V[k].flat(offset, {n}), cv = C[k].flat(offset, {n});
      if (k == 0) {
        be.adamw_update(pv, gv, mv, vv, s);
        be.cast(cv, pv);
      } else {
        be.adamw_update(pv, gv, mv, vv, s, &cv);
      }
    }
  }
  std::string r;
  const char* names[] = {"param", "m", "v", "compute_out"};
  Tensor* bufs[] = {P, M, V, C};
  for (int i = 0; i < 4; ++i) r += diff(names[i], to_host_raw(be, bufs[i][0]), to_host_raw(be, bufs[i][1]));
  // The update moved the weights (a no-op update would pass trivially).
  Tensor p_after = to_host_raw(be, P[1]);
  if (std::memcmp(p_after.raw(), p.data(), p.size() * sizeof(float)) == 0) r += "param did not change\n";
  return r;
}

std::string fp8_swiglu_cast_mismatch(backend::Backend& be, DType act, DType fp8, int64_t R, int64_t F,
                                     uint64_t seed, bool blockwise) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto random = [&](int64_t n, float scale) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = scale * normal(rng);
    Tensor f = upload_f32(be, v), t = be.empty({n}, act);
    be.cast(t, f);
    return t;
  };
  // Scales that put the values across the format's range (some saturate).
  const float scale = fp8 == DType::E4M3 ? 150.f : 9000.f;
  std::vector<float> sc{scale};
  const Tensor fc1 = random(R * 2 * F, 3.f).view({R, 2 * F}), dact = random(R * F, 1.f).view({R, F});
  const Tensor s = upload_f32(be, sc);
  std::string r;
  for (bool backward : {false, true}) {
    const int64_t W = backward ? 2 * F : F;
    // amax: the per-tensor casts' amax; blockwise: the 1x128 scale_inv of
    // out and the 128-row one of out_t.
    Tensor out[2], out_t[2], amax[2], sinv_t[2];
    for (int k = 0; k < 2; ++k) {
      out[k] = be.empty({R, W}, fp8), out_t[k] = be.empty({W, R}, fp8);
      amax[k] = be.empty({blockwise ? backend::fp8_blocks(W) * R : 1}, DType::F32);
      sinv_t[k] = be.empty({backend::fp8_blocks(R) * W}, DType::F32);
      be.zero(amax[k]);
    }
    Tensor tmp = be.empty({R, W}, act);
    if (backward) be.swiglu_backward(tmp, fc1, dact);
    else be.swiglu_forward(tmp, fc1);
    if (blockwise) {
      if (backward) be.fp8_swiglu_backward_block_cast(out[1], amax[1], out_t[1], sinv_t[1], fc1, dact);
      else be.fp8_swiglu_block_cast(out[1], amax[1], out_t[1], sinv_t[1], fc1);
      be.fp8_block_cast(out[0], amax[0], &out_t[0], &sinv_t[0], tmp);
    } else {
      if (backward) be.fp8_swiglu_backward_cast_transpose(out[1], out_t[1], amax[1], fc1, dact, s);
      else be.fp8_swiglu_cast_transpose(out[1], out_t[1], amax[1], fc1, s);
      be.fp8_cast_transpose(out[0], out_t[0], amax[0], tmp, s);
    }
    const std::string tag = backward ? "backward " : "forward ";
    r += diff((tag + "out").c_str(), to_host_raw(be, out[0]), to_host_raw(be, out[1]));
    r += diff((tag + "out_t").c_str(), to_host_raw(be, out_t[0]), to_host_raw(be, out_t[1]));
    r += diff((tag + (blockwise ? "scale_inv" : "amax")).c_str(), to_host_raw(be, amax[0]), to_host_raw(be, amax[1]));
    if (blockwise) r += diff((tag + "scale_inv_t").c_str(), to_host_raw(be, sinv_t[0]), to_host_raw(be, sinv_t[1]));
    if (to_host_raw(be, amax[1]).data<float>()[0] <= 0.f) r += tag + "amax or scale_inv is not positive\n";
  }
  return r;
}

}  // namespace tripod::testing
