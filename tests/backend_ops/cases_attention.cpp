// backend_ops cases: causal attention (forward, backward) for each supported
// head size, the three-step vocab-parallel cross-entropy and its backward
// (also in place), AdamW and sum_squares.
#include "cases.h"

namespace tripod::testing {

using backend::Backend;

void add_attention_cases(std::vector<OpCase>& v) {
  // T not a multiple of the 64-row tiles; several heads; HS 32, 64, 128.
  struct At { const char* tag; int64_t b, t; int nh, hs; };
  for (At s : {At{"_hs32", 2, 70, 3, 32}, At{"_hs64", 1, 130, 2, 64}, At{"_hs128", 1, 45, 2, 128}}) {
    const int64_t B = s.b, T = s.t, C = int64_t(s.nh) * s.hs;
    const int nh = s.nh;
    std::string tag = s.tag;
    v.push_back({"attention_forward" + tag,
                 {out("out", {B, T, C}), out("lse", {B, nh, T}, Kind::F32), in("qkv", {B, T, 3 * C})},
                 [nh](Backend& be, Args& t) { be.attention_forward(t[0], t[1], t[2], nh); }});
    v.push_back({"attention_backward" + tag,
                 {out("dqkv", {B, T, 3 * C}), in("dout", {B, T, C}), in("qkv", {B, T, 3 * C}),
                  in("out", {B, T, C}), in("lse", {B, nh, T}, Kind::F32)},
                 [nh](Backend& be, Args& t) { be.attention_backward(t[0], t[1], t[2], t[3], t[4], nh); },
                 [nh](Backend& be, Args& t) { be.attention_forward(t[3], t[4], t[2], nh); }});
  }

  // Cross-entropy: N=13 rows over a local vocab of 1000 starting at 100;
  // targets also outside the local range (another tp rank's vocab).
  const int64_t N = 13, V = 1000, vs = 100;
  auto stats = [](Backend& be, Args& t, int logits, int row_max, int sums, int targets) {
    be.ce_row_max(t[row_max], t[logits]);
    be.ce_row_sums(t[sums], t[logits], t[row_max], t[targets], vs);
  };
  v.push_back({"ce_row_max", {out("row_max", {N}, Kind::F32), in("logits", {N, V}, Kind::Act, 3.0)},
               [](Backend& be, Args& t) { be.ce_row_max(t[0], t[1]); }});
  v.push_back({"ce_row_sums",
               {out("sums", {2, N}, Kind::F32), in("logits", {N, V}, Kind::Act, 3.0),
                in("row_max", {N}, Kind::F32), ids("targets", {N}, 0, vs + V + 50)},
               [](Backend& be, Args& t) { be.ce_row_sums(t[0], t[1], t[2], t[3], vs); },
               [](Backend& be, Args& t) { be.ce_row_max(t[2], t[1]); }});
  v.push_back({"ce_loss",
               {out("losses", {N}, Kind::F32), in("sums", {2, N}, Kind::F32), in("row_max", {N}, Kind::F32),
                in("logits", {N, V}, Kind::Act, 3.0), ids("targets", {N}, vs, vs + V)},
               [](Backend& be, Args& t) { be.ce_loss(t[0], t[1], t[2]); },
               [stats](Backend& be, Args& t) { stats(be, t, 3, 2, 1, 4); }});
  // A local vocab that is not a multiple of the 16-byte pack (element loops).
  const int64_t Vo = 997;
  v.push_back({"ce_row_sums_oddV",
               {out("sums", {2, N}, Kind::F32), in("logits", {N, Vo}, Kind::Act, 3.0),
                in("row_max", {N}, Kind::F32), ids("targets", {N}, 0, vs + Vo + 50)},
               [](Backend& be, Args& t) { be.ce_row_sums(t[0], t[1], t[2], t[3], vs); },
               [](Backend& be, Args& t) { be.ce_row_max(t[2], t[1]); }});
  v.push_back({"ce_backward_oddV",
               {out("dlogits", {N, Vo}), in("logits", {N, Vo}, Kind::Act, 3.0), in("row_max", {N}, Kind::F32),
                in("sums", {2, N}, Kind::F32), ids("targets", {N}, 0, vs + Vo + 50)},
               [](Backend& be, Args& t) { be.ce_backward(t[0], t[1], t[2], t[3], t[4], vs, 1.f / N); },
               [stats](Backend& be, Args& t) { stats(be, t, 1, 2, 3, 4); }});
  v.push_back({"ce_backward",
               {out("dlogits", {N, V}), in("logits", {N, V}, Kind::Act, 3.0), in("row_max", {N}, Kind::F32),
                in("sums", {2, N}, Kind::F32), ids("targets", {N}, 0, vs + V + 50)},
               [](Backend& be, Args& t) { be.ce_backward(t[0], t[1], t[2], t[3], t[4], vs, 1.f / N); },
               [stats](Backend& be, Args& t) { stats(be, t, 1, 2, 3, 4); }});
  // dlogits aliasing logits (the trainer overwrites the logits buffer).
  v.push_back({"ce_backward_inplace",
               {acc("logits", {N, V}), in("row_max", {N}, Kind::F32), in("sums", {2, N}, Kind::F32),
                ids("targets", {N}, vs, vs + V)},
               [](Backend& be, Args& t) { be.ce_backward(t[0], t[0], t[1], t[2], t[3], vs, 0.5f); },
               [stats](Backend& be, Args& t) { stats(be, t, 0, 1, 2, 3); }});

  // AdamW on f32 state (v >= 0), with weight decay and a gradient scale; an
  // odd size (element loop) and a multiple of 4 (16-byte packs).
  for (int64_t P : {int64_t(3001), int64_t(4096)}) {
    v.push_back({P % 4 ? "adamw_update" : "adamw_update_packed",
                 {acc("param", {P}, Kind::F32), in("grad", {P}, Kind::F32, 0.1), acc("m", {P}, Kind::F32),
                  acc("v", {P}, Kind::F32, true)},
                 [](Backend& be, Args& t) {
                   backend::AdamWStep s;
                   s.lr = 1e-3f;
                   s.weight_decay = 0.1f;
                   s.step = 7;
                   s.grad_scale = 0.5f;
                   be.adamw_update(t[0], t[1], t[2], t[3], s);
                 },
                 {}, true});
  }
  v.push_back({"sum_squares", {acc("acc", {1}, Kind::F32, true), in("x", {5003})},
               [](Backend& be, Args& t) { be.sum_squares(t[0], t[1]); }});
}

const std::vector<OpCase>& all_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> v;
    add_layer_cases(v);
    add_attention_cases(v);
    add_fused_cases(v);
    add_llama_cases(v);
    add_fp8_cases(v);
    add_fp8_attention_cases(v);
    add_context_parallel_cases(v);
    add_moe_cases(v);
    return v;
  }();
  return cases;
}

}  // namespace tripod::testing
