// The shared validators of backend/ops.cpp, driven through the public API:
// every op called with one wrong argument (shape, dtype, or a dtype the
// backend does not compute in) must throw tripod::Error whose message
// starts "<op>: <tensor> ", so the caller learns which op and which
// argument. Runs on the CPU backend, and on the CUDA backend too when one is
// built and a GPU is visible (one set of checks for every backend).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "base/error.h"
#if defined(TRIPOD_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace tripod {
namespace {

using backend::Backend;
constexpr DType F = DType::F32, D = DType::F64, I = DType::I32;

struct Bad {
  std::string op, tensor;  // expected at the start of the message: "<op>: <tensor> "
  std::function<void(Backend&)> call;
};

std::vector<Bad> bad_calls() {
  // Shapes: N=6 rows, C=8, OC=4, V=10, B=2, T=3, 2 heads of 4.
  std::vector<Bad> v;
  auto e = [](Backend& be, Shape s, DType d = F) { return be.empty(s, d); };
  v.push_back({"copy", "dst", [=](Backend& be) { Tensor a = e(be, {4}), b = e(be, {4}, I); be.copy(a, b); }});
  v.push_back({"cast", "dst", [=](Backend& be) { Tensor a = e(be, {4}), b = e(be, {5}); be.cast(a, b); }});
  v.push_back({"add", "b", [=](Backend& be) { Tensor o = e(be, {6, 8}), a = e(be, {6, 8}), b = e(be, {6, 7}); be.add(o, a, b); }});
  v.push_back({"add", "a", [=](Backend& be) { Tensor o = e(be, {6, 8}), a = e(be, {6, 8}, I), b = e(be, {6, 8}); be.add(o, a, b); }});
  v.push_back({"scale", "t", [=](Backend& be) { Tensor t = e(be, {3}, I); be.scale(t, 2.f); }});
  v.push_back({"add_bias", "out", [=](Backend& be) { Tensor o = e(be, {6, 8}), b = e(be, {5}); be.add_bias(o, b); }});
  v.push_back({"embedding_forward", "tokens", [=](Backend& be) {
    Tensor o = e(be, {2, 3, 8}), tok = e(be, {2, 3}), wte = e(be, {10, 8});
    be.embedding_forward(o, tok, wte, nullptr, 0); }});
  v.push_back({"embedding_forward", "wpe", [=](Backend& be) {
    Tensor o = e(be, {2, 3, 8}), tok = e(be, {2, 3}, I), wte = e(be, {10, 8}), wpe = e(be, {2, 8});
    be.embedding_forward(o, tok, wte, &wpe, 0); }});
  v.push_back({"embedding_backward", "dwte", [=](Backend& be) {
    Tensor dwte = e(be, {10, 7}), dout = e(be, {2, 3, 8}), tok = e(be, {2, 3}, I);
    be.embedding_backward(&dwte, nullptr, dout, tok, 0); }});
  v.push_back({"layernorm_forward", "weight", [=](Backend& be) {
    Tensor o = e(be, {6, 8}), m = e(be, {6}), r = e(be, {6}), x = e(be, {6, 8}), w = e(be, {7}), b = e(be, {8});
    be.layernorm_forward(o, m, r, x, w, b, 1e-5f); }});
  v.push_back({"layernorm_forward", "mean", [=](Backend& be) {
    Tensor o = e(be, {6, 8}), m = e(be, {6}, I), r = e(be, {6}), x = e(be, {6, 8}), w = e(be, {8}), b = e(be, {8});
    be.layernorm_forward(o, m, r, x, w, b, 1e-5f); }});
  v.push_back({"layernorm_backward", "rstd", [=](Backend& be) {
    Tensor dx = e(be, {6, 8}), dw = e(be, {8}), db = e(be, {8}), dy = e(be, {6, 8}), x = e(be, {6, 8}), w = e(be, {8}),
           m = e(be, {6}), r = e(be, {5});
    be.layernorm_backward(dx, dw, db, dy, x, w, m, r); }});
  v.push_back({"layernorm_backward", "dout", [=](Backend& be) {
    Tensor dx = e(be, {6, 8}), dw = e(be, {8}), db = e(be, {8}), dy = e(be, {6, 4}), x = e(be, {6, 8}), w = e(be, {8}),
           m = e(be, {6}), r = e(be, {6});
    be.layernorm_backward(dx, dw, db, dy, x, w, m, r); }});
  v.push_back({"fused_residual_layernorm_forward", "b", [=](Backend& be) {
    Tensor res = e(be, {6, 8}), o = e(be, {6, 8}), m = e(be, {6}), r = e(be, {6}), a = e(be, {6, 8}), b = e(be, {6, 9}),
           w = e(be, {8}), bi = e(be, {8});
    be.fused_residual_layernorm_forward(res, o, m, r, a, b, w, bi, 1e-5f); }});
  v.push_back({"fused_residual_layernorm_forward", "bias", [=](Backend& be) {
    Tensor res = e(be, {6, 8}), o = e(be, {6, 8}), m = e(be, {6}), r = e(be, {6}), a = e(be, {6, 8}), b = e(be, {6, 8}),
           w = e(be, {8}), bi = e(be, {9});
    be.fused_residual_layernorm_forward(res, o, m, r, a, b, w, bi, 1e-5f); }});
  v.push_back({"matmul_forward", "inp", [=](Backend& be) {
    Tensor o = e(be, {6, 4}), x = e(be, {6, 7}), w = e(be, {4, 8}); be.matmul_forward(o, x, w, nullptr); }});
  v.push_back({"matmul_forward", "bias", [=](Backend& be) {
    Tensor o = e(be, {6, 4}), x = e(be, {6, 8}), w = e(be, {4, 8}), b = e(be, {3}); be.matmul_forward(o, x, w, &b); }});
  v.push_back({"matmul_forward", "weight", [=](Backend& be) {
    Tensor o = e(be, {6, 4}), x = e(be, {6, 8}), w = e(be, {4, 8}, I); be.matmul_forward(o, x, w, nullptr); }});
  v.push_back({"matmul_backward", "dweight", [=](Backend& be) {
    Tensor dw = e(be, {4, 7}), dy = e(be, {6, 4}), x = e(be, {6, 8}), w = e(be, {4, 8});
    be.matmul_backward(nullptr, &dw, nullptr, dy, x, w); }});
  v.push_back({"matmul_backward", "dinp", [=](Backend& be) {
    Tensor dx = e(be, {6, 8}, I), dy = e(be, {6, 4}), x = e(be, {6, 8}), w = e(be, {4, 8});
    be.matmul_backward(&dx, nullptr, nullptr, dy, x, w); }});
  v.push_back({"matmul_forward_gelu", "pre", [=](Backend& be) {
    Tensor o = e(be, {6, 4}), pre = e(be, {6, 5}), x = e(be, {6, 8}), w = e(be, {4, 8});
    be.matmul_forward_gelu(o, pre, x, w, nullptr); }});
  v.push_back({"matmul_backward_dgelu", "pre", [=](Backend& be) {
    Tensor dpre = e(be, {6, 8}), dy = e(be, {6, 4}), x = e(be, {6, 8}), w = e(be, {4, 8}), pre = e(be, {6, 4});
    be.matmul_backward_dgelu(dpre, nullptr, nullptr, dy, x, w, pre); }});
  v.push_back({"matmul_backward_dgelu", "dbias", [=](Backend& be) {
    Tensor dpre = e(be, {6, 8}), db = e(be, {8}), dy = e(be, {6, 4}), x = e(be, {6, 8}), w = e(be, {4, 8}), pre = e(be, {6, 8});
    be.matmul_backward_dgelu(dpre, nullptr, &db, dy, x, w, pre); }});
  v.push_back({"gelu_forward", "out", [=](Backend& be) { Tensor o = e(be, {5}), x = e(be, {6}); be.gelu_forward(o, x); }});
  v.push_back({"gelu_backward", "dout", [=](Backend& be) {
    Tensor dx = e(be, {6}), x = e(be, {6}), dy = e(be, {6}, I); be.gelu_backward(dx, x, dy); }});
  v.push_back({"attention_forward", "qkv", [=](Backend& be) {
    Tensor o = e(be, {2, 3, 8}), lse = e(be, {2, 3, 3}), qkv = e(be, {2, 3, 24}); be.attention_forward(o, lse, qkv, 3); }});
  v.push_back({"attention_forward", "lse", [=](Backend& be) {
    Tensor o = e(be, {2, 3, 8}), lse = e(be, {2, 2, 4}), qkv = e(be, {2, 3, 24}); be.attention_forward(o, lse, qkv, 2); }});
  v.push_back({"attention_backward", "dqkv", [=](Backend& be) {
    Tensor dqkv = e(be, {2, 3, 8}), dy = e(be, {2, 3, 8}), qkv = e(be, {2, 3, 24}), o = e(be, {2, 3, 8}), lse = e(be, {2, 2, 3});
    be.attention_backward(dqkv, dy, qkv, o, lse, 2); }});
  // Grouped-query attention: 4 query heads, 2 K/V heads of 2 (qkv width (4 + 2*2) * 2 = 16).
  v.push_back({"attention_forward", "n_head", [=](Backend& be) {
    Tensor o = e(be, {2, 3, 6}), lse = e(be, {2, 3, 3}), qkv = e(be, {2, 3, 14}); be.attention_forward(o, lse, qkv, 3, 2); }});
  v.push_back({"attention_forward", "qkv", [=](Backend& be) {
    Tensor o = e(be, {2, 3, 8}), lse = e(be, {2, 4, 3}), qkv = e(be, {2, 3, 15}); be.attention_forward(o, lse, qkv, 4, 2); }});
  v.push_back({"attention_backward", "dout", [=](Backend& be) {
    Tensor dqkv = e(be, {2, 3, 16}), dy = e(be, {2, 3, 16}), qkv = e(be, {2, 3, 16}), o = e(be, {2, 3, 8}), lse = e(be, {2, 4, 3});
    be.attention_backward(dqkv, dy, qkv, o, lse, 4, 2); }});
  v.push_back({"rmsnorm_forward", "weight", [=](Backend& be) {
    Tensor o = e(be, {6, 8}), r = e(be, {6}), x = e(be, {6, 8}), w = e(be, {7}); be.rmsnorm_forward(o, r, x, w, 1e-5f); }});
  v.push_back({"rmsnorm_forward", "rstd", [=](Backend& be) {
    Tensor o = e(be, {6, 8}), r = e(be, {6}, I), x = e(be, {6, 8}), w = e(be, {8}); be.rmsnorm_forward(o, r, x, w, 1e-5f); }});
  v.push_back({"rmsnorm_backward", "dweight", [=](Backend& be) {
    Tensor dx = e(be, {6, 8}), dw = e(be, {9}), dy = e(be, {6, 8}), x = e(be, {6, 8}), w = e(be, {8}), r = e(be, {6});
    be.rmsnorm_backward(dx, dw, dy, x, w, r); }});
  v.push_back({"fused_residual_rmsnorm_forward", "residual", [=](Backend& be) {
    Tensor res = e(be, {6, 7}), o = e(be, {6, 8}), r = e(be, {6}), a = e(be, {6, 8}), b = e(be, {6, 8}), w = e(be, {8});
    be.fused_residual_rmsnorm_forward(res, o, r, a, b, w, 1e-5f); }});
  v.push_back({"rope_forward", "rot_dim", [=](Backend& be) {
    Tensor qkv = e(be, {2, 3, 16}); be.rope_forward(qkv, 4, 2, 3, 10000.f); }});
  v.push_back({"rope_forward", "rot_dim", [=](Backend& be) {
    Tensor qkv = e(be, {2, 3, 16}); be.rope_forward(qkv, 4, 2, 4, 10000.f); }});
  v.push_back({"rope_backward", "dqkv", [=](Backend& be) {
    Tensor dqkv = e(be, {2, 3, 17}); be.rope_backward(dqkv, 4, 2, 2, 10000.f); }});
  v.push_back({"rope_backward", "n_head", [=](Backend& be) {
    Tensor dqkv = e(be, {2, 3, 16}); be.rope_backward(dqkv, 4, 3, 2, 10000.f); }});
  // Context parallelism's block attention: 4 query heads, 2 K/V heads of 2 (qkv width 16, kv width 8).
  v.push_back({"attention_kv_copy", "dst", [=](Backend& be) {
    Tensor kv = e(be, {2, 3, 7}), qkv = e(be, {2, 3, 16}); be.attention_kv_copy(kv, qkv, 4, 2); }});
  v.push_back({"gather_rows", "index", [=](Backend& be) {
    Tensor o = e(be, {4, 8}), x = e(be, {6, 8}), idx = e(be, {3}, DType::I32); be.gather_rows(o, x, idx); }});
  v.push_back({"gather_rows", "out", [=](Backend& be) {
    Tensor o = e(be, {4, 6}), x = e(be, {6, 8}), idx = e(be, {4}, DType::I32); be.gather_rows(o, x, idx); }});
  v.push_back({"attention_block_forward", "blk", [=](Backend& be) {
    Tensor o = e(be, {2, 3, 8}), lse = e(be, {2, 4, 3}), qkv = e(be, {2, 3, 16}), kv = e(be, {2, 3, 8});
    be.attention_block_forward(o, lse, qkv, kv, 4, 2, {2, 3, 0, 3, false}, false); }});
  v.push_back({"attention_block_forward", "blk:", [=](Backend& be) {
    Tensor o = e(be, {2, 3, 8}), lse = e(be, {2, 4, 3}), qkv = e(be, {2, 3, 16}), kv = e(be, {2, 3, 8});
    be.attention_block_forward(o, lse, qkv, kv, 4, 2, {0, 2, 0, 3, true}, false); }});
  v.push_back({"attention_block_forward", "kv", [=](Backend& be) {
    Tensor o = e(be, {2, 3, 8}), lse = e(be, {2, 4, 3}), qkv = e(be, {2, 3, 16}), kv = e(be, {2, 3, 16});
    be.attention_block_forward(o, lse, qkv, kv, 4, 2, {0, 3, 0, 3, true}, false); }});
  v.push_back({"attention_block_backward", "dkv", [=](Backend& be) {
    Tensor dqkv = e(be, {2, 3, 16}), dkv = e(be, {2, 2, 8}), dy = e(be, {2, 3, 8}), qkv = e(be, {2, 3, 16}),
           kv = e(be, {2, 3, 8}), o = e(be, {2, 3, 8}), lse = e(be, {2, 4, 3});
    be.attention_block_backward(dqkv, dkv, dy, qkv, kv, o, lse, 4, 2, {0, 3, 0, 3, true}); }});
  v.push_back({"rope_forward", "positions", [=](Backend& be) {
    Tensor qkv = e(be, {2, 3, 16}), pos = e(be, {4}, I); be.rope_forward(qkv, 4, 2, 2, 10000.f, &pos); }});
  v.push_back({"swiglu_forward", "out", [=](Backend& be) { Tensor o = e(be, {6, 5}), x = e(be, {6, 8}); be.swiglu_forward(o, x); }});
  v.push_back({"swiglu_forward", "inp", [=](Backend& be) { Tensor o = e(be, {6, 4}), x = e(be, {6, 9}); be.swiglu_forward(o, x); }});
  v.push_back({"swiglu_backward", "dout", [=](Backend& be) {
    Tensor dx = e(be, {6, 8}), x = e(be, {6, 8}), dy = e(be, {6, 8}); be.swiglu_backward(dx, x, dy); }});
  v.push_back({"dropout_forward", "out", [=](Backend& be) { Tensor o = e(be, {5}), x = e(be, {6}); be.dropout_forward(o, x, 0.1f, 1, 0); }});
  v.push_back({"dropout_backward", "probability", [=](Backend& be) {
    Tensor dx = e(be, {6}), dy = e(be, {6}); be.dropout_backward(dx, dy, 1.f, 1, 0); }});
  v.push_back({"ce_row_max", "row_max", [=](Backend& be) { Tensor m = e(be, {5}), l = e(be, {6, 10}); be.ce_row_max(m, l); }});
  v.push_back({"ce_row_sums", "targets", [=](Backend& be) {
    Tensor s = e(be, {2, 6}), l = e(be, {6, 10}), m = e(be, {6}), t = e(be, {6}); be.ce_row_sums(s, l, m, t, 0); }});
  v.push_back({"ce_loss", "losses", [=](Backend& be) {
    Tensor loss = e(be, {5}), s = e(be, {2, 6}), m = e(be, {6}); be.ce_loss(loss, s, m); }});
  v.push_back({"ce_backward", "sums", [=](Backend& be) {
    Tensor dl = e(be, {6, 10}), l = e(be, {6, 10}), m = e(be, {6}), s = e(be, {6}), t = e(be, {6}, I);
    be.ce_backward(dl, l, m, s, t, 0, 1.f); }});
  v.push_back({"cross_entropy_fused", "dlogits", [=](Backend& be) {
    Tensor loss = e(be, {6}), dl = e(be, {6, 9}), l = e(be, {6, 10}), t = e(be, {6}, I);
    be.cross_entropy_fused(loss, &dl, l, t, 1.f); }});
  v.push_back({"cross_entropy_fused", "losses", [=](Backend& be) {
    Tensor loss = e(be, {6}, I), l = e(be, {6, 10}), t = e(be, {6}, I); be.cross_entropy_fused(loss, nullptr, l, t, 1.f); }});
  v.push_back({"adamw_update", "m", [=](Backend& be) {
    Tensor p = e(be, {7}), g = e(be, {7}), m = e(be, {6}), s = e(be, {7}); be.adamw_update(p, g, m, s, {}); }});
  v.push_back({"adamw_update", "compute_out", [=](Backend& be) {
    Tensor p = e(be, {7}), g = e(be, {7}), m = e(be, {7}), s = e(be, {7}), c = e(be, {6});
    be.adamw_update(p, g, m, s, {}, &c); }});
  v.push_back({"adamw_update", "compute_out", [=](Backend& be) {  // overlapping the master weights
    Tensor p = e(be, {8}), g = e(be, {8}), m = e(be, {8}), s = e(be, {8});
    Tensor c = p.flat(0, {8}); be.adamw_update(p, g, m, s, {}, &c); }});
  v.push_back({"sum_squares", "acc", [=](Backend& be) { Tensor a = e(be, {2}), x = e(be, {6}); be.sum_squares(a, x); }});
  // FP8: E4M3 / E5M2 tensors, one-element f32 scales.
  constexpr DType E4 = DType::E4M3, E5 = DType::E5M2;
  v.push_back({"fp8_quantize", "out", [=](Backend& be) {
    Tensor o = e(be, {6, 8}), a = e(be, {1}), x = e(be, {6, 8}), s = e(be, {1}); be.fp8_quantize(o, a, x, s); }});
  v.push_back({"fp8_quantize", "scale", [=](Backend& be) {
    Tensor o = e(be, {6, 8}, E4), a = e(be, {1}), x = e(be, {6, 8}), s = e(be, {2}); be.fp8_quantize(o, a, x, s); }});
  v.push_back({"fp8_cast_transpose", "out_t", [=](Backend& be) {
    Tensor o = e(be, {6, 8}, E4), ot = e(be, {6, 8}, E4), a = e(be, {1}), x = e(be, {6, 8}), s = e(be, {1});
    be.fp8_cast_transpose(o, ot, a, x, s); }});
  v.push_back({"fp8_cast_transpose", "out_t", [=](Backend& be) {
    Tensor o = e(be, {6, 8}, E4), ot = e(be, {8, 6}, E5), a = e(be, {1}), x = e(be, {6, 8}), s = e(be, {1});
    be.fp8_cast_transpose(o, ot, a, x, s); }});
  v.push_back({"fp8_dequantize", "in", [=](Backend& be) {
    Tensor o = e(be, {6, 8}), x = e(be, {6, 8}, DType::U8), s = e(be, {1}); be.fp8_dequantize(o, x, s); }});
  v.push_back({"fp8_matmul", "a", [=](Backend& be) {
    Tensor o = e(be, {6, 4}), a = e(be, {6, 8}, E5), sa = e(be, {1}), w = e(be, {4, 8}, E5), sw = e(be, {1});
    be.fp8_matmul(o, a, sa, w, sw); }});
  v.push_back({"fp8_matmul", "a", [=](Backend& be) {
    Tensor o = e(be, {6, 4}), a = e(be, {6, 7}, E4), sa = e(be, {1}), w = e(be, {4, 8}, E4), sw = e(be, {1});
    be.fp8_matmul(o, a, sa, w, sw); }});
  v.push_back({"fp8_matmul", "bias", [=](Backend& be) {
    Tensor o = e(be, {6, 4}), a = e(be, {6, 8}, E4), sa = e(be, {1}), w = e(be, {4, 8}, E4), sw = e(be, {1}),
           b = e(be, {4});
    be.fp8_matmul(o, a, sa, w, sw, &b, true); }});
  v.push_back({"fp8_matmul", "b_scale_inv", [=](Backend& be) {
    Tensor o = e(be, {6, 4}), a = e(be, {6, 8}, E4), sa = e(be, {1}), w = e(be, {4, 8}, E4), sw = e(be, {1}, I);
    be.fp8_matmul(o, a, sa, w, sw); }});
  v.push_back({"fp8_update_scale", "amax_history", [=](Backend& be) {
    Tensor sc = e(be, {3}), si = e(be, {3}), h = e(be, {2, 4}), a = e(be, {3});
    be.fp8_update_scale(sc, si, &h, a, 448.f, 0, true); }});
  v.push_back({"fp8_update_scale", "scale_inv", [=](Backend& be) {
    Tensor sc = e(be, {3}), si = e(be, {2}), a = e(be, {3});
    be.fp8_update_scale(sc, si, nullptr, a, 448.f, 0, false); }});
  // Mixture of experts: N=6 tokens, E=4 experts, top-2, C=8.
  v.push_back({"moe_router_topk", "probs", [=](Backend& be) {
    Tensor p = e(be, {6, 3}), idx = e(be, {6, 2}, I), l = e(be, {6, 4});
    backend::MoeRouting r;
    r.topk = 2;
    be.moe_router_topk(p, idx, l, nullptr, r); }});
  v.push_back({"moe_permute_map", "row_map", [=](Backend& be) {
    Tensor rm = e(be, {11}, I), c = e(be, {4}, I), idx = e(be, {12}, I), p = e(be, {12});
    be.moe_permute_map(rm, c, idx, p, 4, -1, false); }});
  v.push_back({"moe_unpermute", "probs", [=](Backend& be) {
    Tensor o = e(be, {6, 8}), x = e(be, {12, 8}), rm = e(be, {12}, I), p = e(be, {6, 2}, I);
    be.moe_unpermute(o, x, rm, p); }});
  return v;
}

void expect_named(Backend& be, const Bad& b) {
  const std::string prefix = b.op + ": " + b.tensor + " ";
  try {
    b.call(be);
    ADD_FAILURE() << be.name() << ": " << prefix << "... did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.message().rfind(prefix, 0), 0u) << be.name() << ": expected a message starting '" << prefix
                                                << "', got: " << e.message();
  }
}

TEST(OpChecks, CpuNamesOpAndTensor) {
  auto be = backend::make_cpu_backend();
  for (const Bad& b : bad_calls()) expect_named(*be, b);
}

// Integer activations are no activation dtype; bf16 ones the CPU computes
// in by emulation (backend/cpu/half.h).
TEST(OpChecks, CpuRejectsDtypesItDoesNotComputeIn) {
  auto be = backend::make_cpu_backend();
  Tensor o = be->empty({6, 4}, I), x = be->empty({6, 8}, I), w = be->empty({4, 8}, I);
  expect_named(*be, {"matmul_forward", "inp", [&](Backend& b) { b.matmul_forward(o, x, w, nullptr); }});
  Tensor ob = be->empty({6, 4}, DType::BF16), xb = be->empty({6, 8}, DType::BF16), wb = be->empty({4, 8}, DType::BF16);
  Tensor f = be->empty({6, 8}, F);
  be->zero(f);
  EXPECT_NO_THROW(be->cast(xb, f));
  be->zero(wb);
  EXPECT_NO_THROW(be->matmul_forward(ob, xb, wb, nullptr));
  // f64 statistics only under f64 activations.
  Tensor a = be->empty({6, 8}, F), m = be->empty({6}, D), r = be->empty({6}, F), wt = be->empty({8}, F);
  expect_named(*be, {"layernorm_forward", "mean", [&](Backend& b) { b.layernorm_forward(a, m, r, a, wt, wt, 1e-5f); }});
}

// The checks accept what the ops' contracts allow: aliasing outputs, f32
// wide tensors, and the shapes of a real call.
TEST(OpChecks, CpuAcceptsValidCalls) {
  auto be = backend::make_cpu_backend();
  Tensor x = be->empty({6, 8}, F);
  be->zero(x);
  EXPECT_NO_THROW(be->add(x, x, x));
  Tensor loss = be->empty({6}, F), l = be->empty({6, 10}, F), t = be->empty({6}, I);
  be->zero(l);
  be->zero(t);
  EXPECT_NO_THROW(be->cross_entropy_fused(loss, &l, l, t, 1.f));
}

#if defined(TRIPOD_WITH_CUDA)
TEST(OpChecks, CudaNamesOpAndTensor) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  auto be = backend::make_cuda_backend(0);
  for (const Bad& b : bad_calls()) expect_named(*be, b);
  // A host tensor handed to a device op names the device rule.
  Tensor o = be->empty({6}, F), h = Tensor::empty({6}, F);
  expect_named(*be, {"gelu_forward", "inp", [&](Backend& b) { b.gelu_forward(o, h); }});
}
#endif

}  // namespace
}  // namespace tripod
