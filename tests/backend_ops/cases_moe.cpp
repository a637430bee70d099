// backend_ops cases: the mixture-of-experts ops (backend/ops.h, "mixture of
// experts"). The router's top-k (Mixtral's softmax after the top-k,
// Qwen2-MoE's softmax before it, DeepSeek-V3's sigmoid with the expert bias
// and a scaling factor; top-k equal to the expert count; all logits tied,
// so the lower experts must win) and its backward, the auxiliary losses
// (per micro-batch and per sequence, softmax and sigmoid scores), the
// dispatch order (dropless; an expert with no token; every token on one
// expert; a capacity with both drop policies) and the row gathers around
// the experts, with widths the 16-byte packs take (C a multiple of 8) and
// one they do not. Where the inputs must agree (the indices come from the
// router, the row map from the indices), `prepare` derives them on the
// reference; the dispatch order is integers, compared bit for bit. Also the
// experts' grouped GEMMs.
#include <memory>

#include "cases.h"

namespace tripod::testing {

using backend::Backend;

namespace {

backend::MoeRouting routing(int k, bool sigmoid, bool pre_softmax, float scaling = 0.f) {
  backend::MoeRouting r;
  r.topk = k;
  r.sigmoid = sigmoid;
  r.pre_softmax = pre_softmax;
  r.scaling_factor = scaling;
  return r;
}

struct Route {
  const char* tag;
  int64_t N, E;
  int k;
  bool sigmoid, pre_softmax, bias;
  float scaling;
  double logit_scale;  // 0: every logit the same (ties)
};

void add_router_cases(std::vector<OpCase>& v) {
  for (Route s : {Route{"", 37, 8, 2, false, false, false, 0.f, 1.0},
                  Route{"_pre_softmax", 37, 8, 2, false, true, false, 0.f, 1.0},
                  Route{"_sigmoid_bias", 37, 8, 2, true, false, true, 2.5f, 1.0},
                  Route{"_sigmoid_k1", 21, 6, 1, true, false, false, 0.f, 1.0},
                  Route{"_topk_eq_E", 19, 4, 4, false, false, false, 0.f, 1.0},
                  Route{"_pre_softmax_topk_eq_E", 19, 4, 4, false, true, false, 0.f, 1.0},
                  Route{"_ties", 16, 8, 3, false, false, false, 0.f, 0.0},
                  Route{"_sigmoid_ties", 16, 8, 2, true, false, false, 0.f, 0.0},
                  Route{"_many_experts", 33, 64, 6, false, true, false, 0.f, 1.0}}) {
    const int64_t N = s.N, E = s.E;
    const int k = s.k;
    const backend::MoeRouting r = routing(k, s.sigmoid, s.pre_softmax, s.scaling);
    const bool bias = s.bias;
    v.push_back({std::string("moe_router_topk") + s.tag,
                 {out("probs", {N, k}, Kind::F32), out("indices", {N, k}, Kind::Ids),
                  in("logits", {N, E}, Kind::F32, s.logit_scale, 0.25), in("bias", {E}, Kind::F32, 0.3)},
                 [=](Backend& be, Args& t) { be.moe_router_topk(t[0], t[1], t[2], bias ? &t[3] : nullptr, r); }});
    v.push_back({std::string("moe_router_topk_backward") + s.tag,
                 {out("dlogits", {N, E}, Kind::F32), in("dprobs", {N, k}, Kind::F32),
                  in("logits", {N, E}, Kind::F32, s.logit_scale, 0.25), ids("indices", {N, k}, 0, E),
                  in("bias", {E}, Kind::F32, 0.3)},
                 [=](Backend& be, Args& t) { be.moe_router_topk_backward(t[0], t[1], t[2], t[3], r); },
                 [=](Backend& be, Args& t) {  // the indices the forward chooses
                   Tensor probs = be.empty({N, k}, t[2].dtype());
                   be.moe_router_topk(probs, t[3], t[2], bias ? &t[4] : nullptr, r);
                 }});
  }
}

struct Aux {
  const char* tag;
  int64_t N, E;
  int k;
  bool sigmoid;
  int64_t seq_length;
  float aux, z;
};

void add_aux_loss_cases(std::vector<OpCase>& v) {
  for (Aux s : {Aux{"", 40, 8, 2, false, 0, 1e-2f, 1e-3f}, Aux{"_seq", 40, 8, 2, false, 10, 1e-2f, 1e-3f},
                Aux{"_sigmoid", 40, 8, 2, true, 0, 1e-2f, 0.f}, Aux{"_z_only", 33, 6, 1, false, 0, 0.f, 1e-3f},
                Aux{"_topk_eq_E", 24, 4, 4, false, 8, 1e-2f, 1e-3f}}) {
    backend::MoeAuxLoss a;
    a.topk = s.k;
    a.sigmoid = s.sigmoid;
    a.seq_length = s.seq_length;
    a.aux_coeff = s.aux;
    a.z_coeff = s.z;
    a.grad_scale = 0.75f;
    const int64_t N = s.N, E = s.E;
    v.push_back({std::string("moe_aux_loss") + s.tag,
                 {acc("dlogits", {N, E}, Kind::F32), out("losses", {2}, Kind::F32),
                  in("logits", {N, E}, Kind::F32, 1.5)},
                 [=](Backend& be, Args& t) { be.moe_aux_loss(&t[0], t[1], t[2], a); }});
    v.push_back({std::string("moe_aux_loss_forward") + s.tag,
                 {out("losses", {2}, Kind::F32), in("logits", {N, E}, Kind::F32, 1.5)},
                 [=](Backend& be, Args& t) { be.moe_aux_loss(nullptr, t[0], t[1], a); }});
  }
}

// The dispatch: indices in [lo, hi) of E experts (hi - lo = 1: every slot
// on one expert; hi < E: experts without tokens), capacity < 0 dropless.
struct Dispatch {
  const char* tag;
  int64_t N, E;
  int k;
  int64_t lo, hi, capacity;
  bool by_probs;
  int64_t R;  // the kept rows: N k dropless, else what the capacity leaves
  int64_t C;
};

constexpr Dispatch kDispatch[] = {
    {"", 29, 8, 2, 0, 8, -1, false, 58, 64},
    {"_odd", 29, 8, 2, 0, 8, -1, false, 58, 37},
    {"_empty_experts", 31, 8, 2, 2, 6, -1, false, 62, 64},
    {"_one_expert", 23, 8, 1, 5, 6, -1, false, 23, 40},
    {"_topk_eq_E", 17, 4, 4, 0, 4, -1, false, 68, 24},
    {"_capacity_probs", 25, 4, 2, 3, 4, 13, true, 13, 32},
    {"_capacity_position", 25, 4, 2, 3, 4, 13, false, 13, 33},
};

// Derives the row map (and counts) of the case's indices on the reference:
// args[ri] = the first R entries of moe_permute_map's row map.
void derive_row_map(Backend& be, Args& t, size_t idx, size_t probs, size_t ri, const Dispatch& s) {
  Tensor full = be.empty({s.N * s.k}, DType::I32), counts = be.empty({s.E}, DType::I32);
  be.moe_permute_map(full, counts, t[idx], t[probs], s.E, s.capacity, s.by_probs);
  be.copy(t[ri], full.narrow(0, s.R));
}

void add_dispatch_cases(std::vector<OpCase>& v) {
  for (const Dispatch& s : kDispatch) {
    const int64_t N = s.N, E = s.E, R = s.R, C = s.C;
    const int k = s.k;
    OpCase map{std::string("moe_permute_map") + s.tag,
               {out("row_map", {N * k}, Kind::Ids), out("counts", {E}, Kind::Ids), ids("indices", {N * k}, s.lo, s.hi),
                in("probs", {N * k}, Kind::F32)},
               [=](Backend& be, Args& t) { be.moe_permute_map(t[0], t[1], t[2], t[3], E, s.capacity, s.by_probs); }};
    map.exact = true;
    v.push_back(map);
    // Row ops: t = [out..., row_map, indices, probs] with the map derived from indices and probs.
    v.push_back({std::string("moe_permute") + s.tag,
                 {out("out", {R, C}), in("inp", {N, C}), ids("row_map", {R}, 0, 1), ids("indices", {N * k}, s.lo, s.hi),
                  in("probs", {N * k}, Kind::F32)},
                 [=](Backend& be, Args& t) { be.moe_permute(t[0], t[1], t[2], k); },
                 [=](Backend& be, Args& t) { derive_row_map(be, t, 3, 4, 2, s); }});
    v.push_back({std::string("moe_permute_backward") + s.tag,
                 {out("dinp", {N, C}), in("dout", {R, C}), ids("row_map", {R}, 0, 1),
                  ids("indices", {N * k}, s.lo, s.hi), in("probs", {N * k}, Kind::F32)},
                 [=](Backend& be, Args& t) { be.moe_permute_backward(t[0], t[1], t[2], k); },
                 [=](Backend& be, Args& t) { derive_row_map(be, t, 3, 4, 2, s); }});
    v.push_back({std::string("moe_unpermute") + s.tag,
                 {out("out", {N, C}), in("inp", {R, C}), ids("row_map", {R}, 0, 1),
                  ids("indices", {N * k}, s.lo, s.hi), positive("probs", {N, k}, Kind::F32, 0.5)},
                 [=](Backend& be, Args& t) { be.moe_unpermute(t[0], t[1], t[2], t[4]); },
                 [=](Backend& be, Args& t) { derive_row_map(be, t, 3, 4, 2, s); }});
    v.push_back({std::string("moe_unpermute_backward") + s.tag,
                 {out("dinp", {R, C}), out("dprobs", {N, k}, Kind::F32), in("dout", {N, C}), in("inp", {R, C}),
                  ids("row_map", {R}, 0, 1), ids("indices", {N * k}, s.lo, s.hi),
                  positive("probs", {N, k}, Kind::F32, 0.5)},
                 [=](Backend& be, Args& t) { be.moe_unpermute_backward(t[0], t[1], t[2], t[3], t[4], t[6]); },
                 [=](Backend& be, Args& t) { derive_row_map(be, t, 5, 6, 4, s); }});
  }
}

// The experts' grouped GEMMs (--moe-grouped-gemm): groups of 5, 0, 17 and 3
// rows, a group without weight (padding: its rows keep their values, so
// out is an accumulator here and the untouched rows are compared too) and
// rows past the groups; widths cuBLAS's grouped call takes and odd ones.
void add_grouped_matmul_cases(std::vector<OpCase>& v) {
  struct Grouped {
    const char* tag;
    int64_t C, OC;
  };
  const std::vector<int64_t> rows = {5, 0, 4, 17, 3};
  const std::vector<bool> weighted = {true, true, false, true, true};
  const int64_t R = 33, G = 4;  // 29 rows in groups, 4 past them
  for (Grouped s : {Grouped{"", 24, 40}, Grouped{"_odd", 13, 7}}) {
    const int64_t C = s.C, OC = s.OC;
    auto weights = [=](const Tensor& w) {  // views of the stacked (G, OC, C) weights; null for padding
      auto views = std::make_shared<std::vector<Tensor>>();
      std::vector<const Tensor*> ptrs;
      int64_t e = 0;
      for (size_t g = 0; g < rows.size(); ++g) views->push_back(weighted[g] ? w.flat(OC * C * e++, {OC, C}) : Tensor());
      for (size_t g = 0; g < rows.size(); ++g) ptrs.push_back(weighted[g] ? &(*views)[g] : nullptr);
      return std::make_pair(views, ptrs);
    };
    v.push_back({std::string("grouped_matmul_forward") + s.tag,
                 {acc("out", {R, OC}), in("inp", {R, C}), in("w", {G, OC, C}, Kind::Act, 0.3)},
                 [=](Backend& be, Args& t) {
                   auto [keep, w] = weights(t[2]);
                   be.grouped_matmul_forward(t[0], t[1], w, rows);
                 }});
    v.push_back({std::string("grouped_matmul_backward_data") + s.tag,
                 {acc("dinp", {R, C}), in("dout", {R, OC}), in("w", {G, OC, C}, Kind::Act, 0.3)},
                 [=](Backend& be, Args& t) {
                   auto [keep, w] = weights(t[2]);
                   be.grouped_matmul_backward_data(t[0], t[1], w, rows);
                 }});
  }
}

}  // namespace

void add_moe_cases(std::vector<OpCase>& v) {
  add_router_cases(v);
  add_aux_loss_cases(v);
  add_dispatch_cases(v);
  add_grouped_matmul_cases(v);
}

}  // namespace tripod::testing
