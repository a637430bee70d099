// backend_ops cases: the Llama-family ops (RMSNorm, fused residual +
// RMSNorm, rotary position embedding, SwiGLU) and grouped-query attention.
// Each runs on a shape the CUDA fast path takes (16-byte packs: widths
// multiples of 8; head size 128 with T a few tiles long) and on one it does
// not (odd widths, T not a multiple of the 64-row tiles).
#include "cases.h"

namespace tripod::testing {

using backend::Backend;

namespace {

// RMSNorm backward on (N, C) with weights of kind wk; rstd comes from the
// reference forward of the same input.
OpCase rmsnorm_backward_case(std::string name, int64_t N, int64_t C, Kind wk) {
  return {std::move(name),
          {acc("dinp", {N, C}), acc("dweight", {C}, Kind::F32), in("dout", {N, C}),
           in("inp", {N, C}, Kind::Act, 2.0, 0.5), in("weight", {C}, wk, 0.5, 1.0), in("rstd", {N}, Kind::F32)},
          [](Backend& be, Args& t) { be.rmsnorm_backward(t[0], t[1], t[2], t[3], t[4], t[5]); },
          [](Backend& be, Args& t) {
            Tensor y = be.empty(t[3].shape(), t[3].dtype());
            be.rmsnorm_forward(y, t[5], t[3], t[4], 1e-5f);
          }};
}

}  // namespace

void add_llama_cases(std::vector<OpCase>& v) {
  // ---- RMSNorm: odd width (element loops), packable widths, Llama-1B width ----
  struct Rn { const char* tag; int64_t n, c; Kind wk; };
  for (Rn s : {Rn{"", 67, 100, Kind::Act}, Rn{"_f32_params", 67, 100, Kind::F32}, Rn{"_packed", 64, 96, Kind::F32},
               Rn{"_wide", 21, 2048, Kind::F32},
               // --qk-layernorm (model/qk_norm.h): many rows of one head, HS 128 and 64
               Rn{"_qk_head128", 96, 128, Kind::F32}, Rn{"_qk_head64", 192, 64, Kind::F32}}) {
    const int64_t N = s.n, C = s.c;
    v.push_back({std::string("rmsnorm_forward") + s.tag,
                 {out("out", {N, C}), out("rstd", {N}, Kind::F32), in("inp", {N, C}, Kind::Act, 2.0, 0.5),
                  in("weight", {C}, s.wk, 0.5, 1.0)},
                 [](Backend& be, Args& t) { be.rmsnorm_forward(t[0], t[1], t[2], t[3], 1e-5f); }});
    v.push_back(rmsnorm_backward_case(std::string("rmsnorm_backward") + s.tag, N, C, s.wk));
    v.push_back({std::string("fused_residual_rmsnorm_forward") + s.tag,
                 {out("residual", {N, C}), out("out", {N, C}), out("rstd", {N}, Kind::F32),
                  in("a", {N, C}, Kind::Act, 2.0, 0.5), in("b", {N, C}), in("weight", {C}, s.wk, 0.5, 1.0)},
                 [](Backend& be, Args& t) {
                   be.fused_residual_rmsnorm_forward(t[0], t[1], t[2], t[3], t[4], t[5], 1e-5f);
                 }});
  }
  // In place: the residual stream is both an input and the output.
  v.push_back({"fused_residual_rmsnorm_forward_inplace",
               {acc("residual", {64, 96}), out("out", {64, 96}), out("rstd", {64}, Kind::F32), in("b", {64, 96}),
                in("weight", {96}, Kind::F32, 0.5, 1.0)},
               [](Backend& be, Args& t) {
                 be.fused_residual_rmsnorm_forward(t[0], t[1], t[2], t[0], t[3], t[4], 1e-5f);
               }});

  // ---- RoPE, in place on qkv (Acc: random initial values, compared after) ----
  // Full rotation, Megatron's --rotary-percent 0.5, an odd head count, MHA
  // (n_kv_head 0), Llama's head size 128 with base 500000 (Llama 3), and a
  // head size that is not a multiple of 8 (no 16-byte packs).
  struct Rp { const char* tag; int64_t b, t; int nh, g; int64_t hs, rot; float base; };
  for (Rp s : {Rp{"", 2, 37, 4, 2, 32, 32, 10000.f}, Rp{"_partial", 1, 50, 6, 3, 64, 32, 10000.f},
               Rp{"_mha", 2, 19, 3, 0, 32, 32, 10000.f}, Rp{"_hs128", 1, 70, 4, 1, 128, 128, 500000.f},
               Rp{"_odd", 2, 23, 2, 1, 12, 6, 10000.f}}) {
    const int64_t W = (s.nh + 2 * (s.g ? s.g : s.nh)) * s.hs;
    const int nh = s.nh, g = s.g;
    const int64_t rot = s.rot;
    const float base = s.base;
    v.push_back({std::string("rope_forward") + s.tag, {acc("qkv", {s.b, s.t, W})},
                 [=](Backend& be, Args& t) { be.rope_forward(t[0], nh, g, rot, base); }});
    v.push_back({std::string("rope_backward") + s.tag, {acc("dqkv", {s.b, s.t, W})},
                 [=](Backend& be, Args& t) { be.rope_backward(t[0], nh, g, rot, base); }});
  }

  // ---- SwiGLU: odd F (element loops) and F a multiple of 8 (16-byte packs) ----
  for (int64_t F : {int64_t(100), int64_t(96)}) {
    const std::string tag = F == 100 ? "" : "_packed";
    const int64_t N = 67;
    v.push_back({"swiglu_forward" + tag, {out("out", {N, F}), in("inp", {N, 2 * F}, Kind::Act, 2.0)},
                 [](Backend& be, Args& t) { be.swiglu_forward(t[0], t[1]); }});
    v.push_back({"swiglu_backward" + tag,
                 {out("dinp", {N, 2 * F}), in("inp", {N, 2 * F}, Kind::Act, 2.0), in("dout", {N, F})},
                 [](Backend& be, Args& t) { be.swiglu_backward(t[0], t[1], t[2]); }});
  }

  // ---- grouped-query attention: groups of 2 and 4, multi-query (one K/V
  // head), head sizes 32, 64, 128; T not a multiple of the 64-row tiles ----
  struct At { const char* tag; int64_t b, t; int nh, g, hs; };
  for (At s : {At{"_gqa_hs32", 2, 70, 4, 2, 32}, At{"_gqa_hs64", 1, 130, 4, 1, 64},
               At{"_gqa_hs128", 1, 77, 8, 2, 128}}) {
    const int64_t B = s.b, T = s.t, C = int64_t(s.nh) * s.hs, W = int64_t(s.nh + 2 * s.g) * s.hs;
    const int nh = s.nh, g = s.g;
    const std::string tag = s.tag;
    v.push_back({"attention_forward" + tag,
                 {out("out", {B, T, C}), out("lse", {B, nh, T}, Kind::F32), in("qkv", {B, T, W})},
                 [nh, g](Backend& be, Args& t) { be.attention_forward(t[0], t[1], t[2], nh, g); }});
    v.push_back({"attention_backward" + tag,
                 {out("dqkv", {B, T, W}), in("dout", {B, T, C}), in("qkv", {B, T, W}), in("out", {B, T, C}),
                  in("lse", {B, nh, T}, Kind::F32)},
                 [nh, g](Backend& be, Args& t) { be.attention_backward(t[0], t[1], t[2], t[3], t[4], nh, g); },
                 [nh, g](Backend& be, Args& t) { be.attention_forward(t[3], t[4], t[2], nh, g); }});
  }
}

}  // namespace tripod::testing
