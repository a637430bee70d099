// backend_ops cases: the fused ops (backend/ops.h) and the LayerNorm
// backward shapes that take the packed CUDA kernel. Each fused op runs on
// a shape its CUDA fast path takes (16-byte packs, cuBLASLt epilogues: widths
// multiples of 8) and on one it does not (element loops, the composed
// fallback); the reference is the CPU backend in f64 (the unfused sequence).
// Also AdamW with the compute copy written in its pass.
#include "cases.h"

namespace tripod::testing {

using backend::Backend;

void add_fused_cases(std::vector<OpCase>& v) {
  // ---- residual add + LayerNorm ----
  struct Ln { const char* tag; int64_t n, c; Kind wk; };
  for (Ln s : {Ln{"", 64, 96, Kind::Act}, Ln{"_f32_params", 64, 96, Kind::F32}, Ln{"_odd", 67, 100, Kind::Act},
               Ln{"_wide", 21, 1600, Kind::F32}}) {
    const int64_t N = s.n, C = s.c;
    v.push_back({std::string("fused_residual_layernorm_forward") + s.tag,
                 {out("residual", {N, C}), out("out", {N, C}), out("mean", {N}, Kind::F32),
                  out("rstd", {N}, Kind::F32), in("a", {N, C}, Kind::Act, 2.0, 0.5), in("b", {N, C}),
                  in("weight", {C}, s.wk, 0.5, 1.0), in("bias", {C}, s.wk, 0.2)},
                 [](Backend& be, Args& t) {
                   be.fused_residual_layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], 1e-5f);
                 }});
  }
  // In place: the residual stream is both an input and the output.
  v.push_back({"fused_residual_layernorm_forward_inplace",
               {acc("residual", {64, 96}), out("out", {64, 96}), out("mean", {64}, Kind::F32),
                out("rstd", {64}, Kind::F32), in("b", {64, 96}), in("weight", {96}, Kind::F32, 0.5, 1.0),
                in("bias", {96}, Kind::F32, 0.2)},
               [](Backend& be, Args& t) {
                 be.fused_residual_layernorm_forward(t[0], t[1], t[2], t[3], t[0], t[4], t[5], t[6], 1e-5f);
               }});

  // ---- matmul + GELU (the MLP's fc) and its backward through the proj ----
  struct MM { const char* tag; int64_t n, c, oc; };
  for (MM s : {MM{"", 64, 96, 160}, MM{"_odd", 33, 36, 20}}) {
    const std::string tag = s.tag;
    v.push_back({"matmul_forward_gelu" + tag,
                 {out("out", {s.n, s.oc}), out("pre", {s.n, s.oc}), in("inp", {s.n, s.c}),
                  in("weight", {s.oc, s.c}, Kind::Act, 0.2), in("bias", {s.oc})},
                 [](Backend& be, Args& t) { be.matmul_forward_gelu(t[0], t[1], t[2], t[3], &t[4]); }});
    v.push_back({"matmul_forward_gelu_nobias" + tag,
                 {out("out", {s.n, s.oc}), out("pre", {s.n, s.oc}), in("inp", {s.n, s.c}),
                  in("weight", {s.oc, s.c}, Kind::Act, 0.2)},
                 [](Backend& be, Args& t) { be.matmul_forward_gelu(t[0], t[1], t[2], t[3], nullptr); }});
    // proj layer: inp(N, C) = gelu(pre), weight (OC, C); dpre overwritten.
    v.push_back({"matmul_backward_dgelu" + tag,
                 {out("dpre", {s.n, s.c}), acc("dweight", {s.oc, s.c}, Kind::F32), acc("dbias", {s.oc}, Kind::F32),
                  in("dout", {s.n, s.oc}), in("inp", {s.n, s.c}), in("weight", {s.oc, s.c}, Kind::Act, 0.2),
                  in("pre", {s.n, s.c}, Kind::Act, 2.0)},
                 [](Backend& be, Args& t) {
                   be.matmul_backward_dgelu(t[0], &t[1], &t[2], t[3], t[4], t[5], t[6]);
                 },
                 [](Backend& be, Args& t) { be.gelu_forward(t[4], t[6]); }});
  }
  v.push_back({"matmul_backward_dgelu_dpre_only",
               {out("dpre", {64, 96}), in("dout", {64, 160}), in("inp", {64, 96}),
                in("weight", {160, 96}, Kind::Act, 0.2), in("pre", {64, 96}, Kind::Act, 2.0)},
               [](Backend& be, Args& t) {
                 be.matmul_backward_dgelu(t[0], nullptr, nullptr, t[1], t[2], t[3], t[4]);
               },
               [](Backend& be, Args& t) { be.gelu_forward(t[2], t[4]); }});

  // ---- one-pass cross-entropy (tp = 1): packable and odd vocab, with and
  // without the gradient, and in place ----
  const int64_t N = 13;
  for (int64_t V : {int64_t(1000), int64_t(997)}) {
    const std::string tag = V == 1000 ? "" : "_oddV";
    v.push_back({"cross_entropy_fused" + tag,
                 {out("losses", {N}, Kind::F32), out("dlogits", {N, V}), in("logits", {N, V}, Kind::Act, 3.0),
                  ids("targets", {N}, 0, V)},
                 [](Backend& be, Args& t) { be.cross_entropy_fused(t[0], &t[1], t[2], t[3], 1.f / N); }});
    v.push_back({"cross_entropy_fused_loss_only" + tag,
                 {out("losses", {N}, Kind::F32), in("logits", {N, V}, Kind::Act, 3.0), ids("targets", {N}, 0, V)},
                 [](Backend& be, Args& t) { be.cross_entropy_fused(t[0], nullptr, t[1], t[2], 0.f); }});
  }
  v.push_back({"cross_entropy_fused_inplace",
               {out("losses", {N}, Kind::F32), acc("logits", {N, 1000}, Kind::Act, false), ids("targets", {N}, 0, 1000)},
               [](Backend& be, Args& t) { be.cross_entropy_fused(t[0], &t[1], t[1], t[2], 0.5f); }});

  // ---- AdamW writing the compute copy (adamw_update's compute_out) ----
  // f32 state, the copy in the tested dtype (f32: the composed default;
  // bf16/f16: the CUDA one-pass kernel); 16-byte packs and the element loop.
  // That the copy is exactly cast() of the update: adamw_compute_out_mismatch.
  for (int64_t P : {int64_t(4096), int64_t(3001)}) {
    v.push_back({P % 4 ? "adamw_update_compute_out_odd" : "adamw_update_compute_out",
                 {acc("param", {P}, Kind::F32), in("grad", {P}, Kind::F32, 0.1), acc("m", {P}, Kind::F32),
                  acc("v", {P}, Kind::F32, true), out("compute", {P})},
                 [](Backend& be, Args& t) {
                   backend::AdamWStep s;
                   s.lr = 1e-3f;
                   s.weight_decay = 0.1f;
                   s.step = 7;
                   s.grad_scale = 0.5f;
                   be.adamw_update(t[0], t[1], t[2], t[3], s, &t[4]);
                 }});
  }
}

}  // namespace tripod::testing
