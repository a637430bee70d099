// backend_ops cases: elementwise, casts, GELU, dropout, embedding,
// LayerNorm and matmul. Shapes are small (the f64 reference runs on 2 CPU
// cores) but not multiples of the kernels' tile or warp sizes, so tails and
// bounds are exercised.
#include "cases.h"

namespace tripod::testing {

using backend::Backend;

namespace {
// LayerNorm backward on (N, C) with weights of kind wk; mean and rstd come
// from the reference forward of the same input. With recompute, the same
// call also writes the forward's output again (out, from bias).
OpCase layernorm_backward_case(std::string name, int64_t N, int64_t C, Kind wk, bool recompute = false) {
  std::vector<ArgSpec> args = {acc("dinp", {N, C}), acc("dweight", {C}, Kind::F32), acc("dbias", {C}, Kind::F32),
                               in("dout", {N, C}), in("inp", {N, C}, Kind::Act, 2.0, 0.5),
                               in("weight", {C}, wk, 0.5, 1.0), in("mean", {N}, Kind::F32), in("rstd", {N}, Kind::F32)};
  if (recompute) {
    args.push_back(out("out", {N, C}));
    args.push_back(in("bias", {C}, wk, 0.2));
  }
  return {std::move(name), std::move(args),
          [recompute](Backend& be, Args& t) {
            if (recompute)
              be.layernorm_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], &t[8], &t[9]);
            else
              be.layernorm_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]);
          },
          [](Backend& be, Args& t) {
            Tensor y = be.empty(t[4].shape(), t[4].dtype());
            Tensor b = be.empty(t[5].shape(), t[5].dtype());
            be.zero(b);
            be.layernorm_forward(y, t[6], t[7], t[4], t[5], b, 1e-5f);
          }};
}
}  // namespace

void add_layer_cases(std::vector<OpCase>& v) {
  const int64_t N = 67, C = 100;

  v.push_back({"add", {out("out", {N, C}), in("a", {N, C}), in("b", {N, C})},
               [](Backend& be, Args& t) { be.add(t[0], t[1], t[2]); }});
  v.push_back({"add_inplace", {acc("out", {N, C}), in("b", {N, C})},
               [](Backend& be, Args& t) { be.add(t[0], t[0], t[1]); }});
  v.push_back({"scale", {acc("t", {N, C})}, [](Backend& be, Args& t) { be.scale(t[0], 0.37f); }});
  v.push_back({"add_bias", {acc("out", {N, C}), in("bias", {C})},
               [](Backend& be, Args& t) { be.add_bias(t[0], t[1]); }});
  v.push_back({"cast_from_f32", {out("dst", {N, C}), in("src", {N, C}, Kind::F32)},
               [](Backend& be, Args& t) { be.cast(t[0], t[1]); }});
  v.push_back({"cast_to_f32", {out("dst", {N, C}, Kind::F32), in("src", {N, C})},
               [](Backend& be, Args& t) { be.cast(t[0], t[1]); }});

  // GELU on an odd size (element loop) and a 16-byte-packable one (pack loop).
  for (int64_t w : {C, int64_t(96)}) {
    std::string tag = w == C ? "" : "_packed";
    v.push_back({"gelu_forward" + tag, {out("out", {N, w}), in("inp", {N, w}, Kind::Act, 2.0)},
                 [](Backend& be, Args& t) { be.gelu_forward(t[0], t[1]); }});
    v.push_back({"gelu_backward" + tag,
                 {out("dinp", {N, w}), in("inp", {N, w}, Kind::Act, 2.0), in("dout", {N, w})},
                 [](Backend& be, Args& t) { be.gelu_backward(t[0], t[1], t[2]); }});
  }
  v.push_back({"add_packed", {out("out", {64, 96}), in("a", {64, 96}), in("b", {64, 96})},
               [](Backend& be, Args& t) { be.add(t[0], t[1], t[2]); }});
  v.push_back({"dropout_forward", {out("out", {N, C}), in("inp", {N, C})},
               [](Backend& be, Args& t) { be.dropout_forward(t[0], t[1], 0.1f, 1234, 777); }});
  v.push_back({"dropout_backward", {out("dinp", {N, C}), in("dout", {N, C})},
               [](Backend& be, Args& t) { be.dropout_backward(t[0], t[1], 0.3f, 99, 5); }});

  // Embedding: B=3, T=21, C=40, local vocab rows [10, 10+50); token ids also
  // outside the range (vocab-parallel: zero rows there).
  const int64_t B = 3, T = 21, E = 40, V = 50, vs = 10;
  v.push_back({"embedding_forward",
               {out("out", {B, T, E}), ids("tokens", {B, T}, 0, vs + V + 8), in("wte", {V, E}),
                in("wpe", {T + 3, E})},
               [](Backend& be, Args& t) { be.embedding_forward(t[0], t[1], t[2], &t[3], vs); }});
  v.push_back({"embedding_forward_nopos",
               {out("out", {B, T, E}), ids("tokens", {B, T}, vs, vs + V), in("wte", {V, E})},
               [](Backend& be, Args& t) { be.embedding_forward(t[0], t[1], t[2], nullptr, vs); }});
  // Few distinct tokens, so rows repeat and dwte accumulates several rows each.
  v.push_back({"embedding_backward",
               {acc("dwte", {V, E}, Kind::F32), acc("dwpe", {T, E}, Kind::F32),
                in("dout", {B, T, E}), ids("tokens", {B, T}, vs - 2, vs + 12)},
               [](Backend& be, Args& t) { be.embedding_backward(&t[0], &t[1], t[2], t[3], vs); }});
  // --deterministic-mode's dwte without atomics (CUDA: rows sorted by token):
  // ~20 rows per token, so a token's run spans the 8-row loads and a tail.
  v.push_back({"embedding_backward_deterministic",
               {acc("dwte", {V, E}, Kind::F32), in("dout", {4, 64, E}), ids("tokens", {4, 64}, vs - 3, vs + 9)},
               [](Backend& be, Args& t) {
                 be.set_deterministic(true);
                 be.embedding_backward(&t[0], nullptr, t[1], t[2], vs);
                 be.set_deterministic(false);
               }});

  // LayerNorm over C=100 with a non-zero mean; weight/bias in the tested
  // dtype, and in f32 (fp32 LayerNorm params under bf16/f16 activations,
  // model/param_table.h).
  for (Kind wk : {Kind::Act, Kind::F32}) {
    const std::string tag = wk == Kind::Act ? "" : "_f32_params";
    v.push_back({"layernorm_forward" + tag,
                 {out("out", {N, C}), out("mean", {N}, Kind::F32), out("rstd", {N}, Kind::F32),
                  in("inp", {N, C}, Kind::Act, 2.0, 0.5), in("weight", {C}, wk, 0.5, 1.0), in("bias", {C}, wk, 0.2)},
                 [](Backend& be, Args& t) {
                   be.layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5], 1e-5f);
                 }});
    v.push_back(layernorm_backward_case("layernorm_backward" + tag, N, C, wk));
  }

  // GPT-2 1.5B width: the backward's per-warp accumulators need > 48 KB of shared memory.
  v.push_back(layernorm_backward_case("layernorm_backward_wide", 21, 1600, Kind::Act));
  // The packed CUDA kernel's shapes (C % 8 == 0: 16-byte packs for f32, bf16
  // and f16) with fp32 params, narrow and wide.
  v.push_back(layernorm_backward_case("layernorm_backward_packed", 67, 96, Kind::F32));
  v.push_back(layernorm_backward_case("layernorm_backward_packed_wide_f32_params", 21, 1600, Kind::F32));
  // --qk-layernorm (model/qk_norm.h) with LayerNorm: many rows of one head
  // (HS 64 and 128, fp32 params), the weight gradient summed over all of them.
  for (int64_t hs : {int64_t(64), int64_t(128)}) {
    const int64_t rows = 3 * 4096 / hs;
    v.push_back({"layernorm_forward_qk_head" + std::to_string(hs),
                 {out("out", {rows, hs}), out("mean", {rows}, Kind::F32), out("rstd", {rows}, Kind::F32),
                  in("inp", {rows, hs}, Kind::Act, 2.0, 0.5), in("weight", {hs}, Kind::F32, 0.5, 1.0),
                  in("bias", {hs}, Kind::F32, 0.2)},
                 [](Backend& be, Args& t) {
                   be.layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5], 1e-5f);
                 }});
    v.push_back(layernorm_backward_case("layernorm_backward_qk_head" + std::to_string(hs), rows, hs, Kind::F32));
  }
  // With the forward's output recomputed in the same pass (the model's path):
  // odd width (element kernel) and packed widths.
  v.push_back(layernorm_backward_case("layernorm_backward_recompute", N, C, Kind::F32, true));
  v.push_back(layernorm_backward_case("layernorm_backward_recompute_packed", 67, 96, Kind::F32, true));
  v.push_back(layernorm_backward_case("layernorm_backward_recompute_packed_act_params", 21, 1600, Kind::Act, true));

  // Matmul: one GPT-like aligned shape and one odd shape (unaligned rows).
  struct MM { const char* tag; int64_t n, c, oc; };
  for (MM s : {MM{"", 64, 96, 160}, MM{"_odd", 33, 40, 24}}) {
    std::string tag = s.tag;
    v.push_back({"matmul_forward_bias" + tag,
                 {out("out", {s.n, s.oc}), in("inp", {s.n, s.c}), in("weight", {s.oc, s.c}, Kind::Act, 0.2),
                  in("bias", {s.oc})},
                 [](Backend& be, Args& t) { be.matmul_forward(t[0], t[1], t[2], &t[3]); }});
    v.push_back({"matmul_forward" + tag,
                 {out("out", {s.n, s.oc}), in("inp", {s.n, s.c}), in("weight", {s.oc, s.c}, Kind::Act, 0.2)},
                 [](Backend& be, Args& t) { be.matmul_forward(t[0], t[1], t[2], nullptr); }});
    v.push_back({"matmul_backward" + tag,
                 {out("dinp", {s.n, s.c}), acc("dweight", {s.oc, s.c}, Kind::F32),
                  acc("dbias", {s.oc}, Kind::F32), in("dout", {s.n, s.oc}), in("inp", {s.n, s.c}),
                  in("weight", {s.oc, s.c}, Kind::Act, 0.2)},
                 [](Backend& be, Args& t) { be.matmul_backward(&t[0], &t[1], &t[2], t[3], t[4], t[5]); }});
  }
}

}  // namespace tripod::testing
