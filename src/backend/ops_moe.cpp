// Validators of the mixture-of-experts ops (backend/ops.h, "mixture of
// experts"), and the default _impls, which stop: a backend without the
// kernels refuses a MoE model with the op's name instead of computing a
// part of it.
#include <fmt/format.h>

#include "backend/checks.h"
#include "backend/ops.h"

namespace tripod::backend {
using checks::Checks;

namespace {

// Statistics of either width (the router is f32, or f64 on the reference).
DType stat_of(const Checks& k, const Tensor& t, const char* name) {
  k.on_device(t, name);
  k.that(t.dtype() == DType::F32 || t.dtype() == DType::F64,
         fmt::format("{} {} must be statistics (f32, or f64 on the reference)", name, t.str()));
  return t.dtype();
}

void router_shapes(const Checks& k, const Tensor& logits, const Tensor& indices, int topk) {
  k.dim(logits, "logits", 2, "(N, E)");
  const int64_t N = logits.size(0), E = logits.size(1);
  k.that(topk >= 1 && topk <= E, fmt::format("topk {} must be in [1, E = {}]", topk, E));
  k.ids(indices, "indices", N * topk, "N * k");
}

[[noreturn]] void missing(const Backend& be, const char* op) {
  ::tripod::detail::check_failed(
      nullptr, __FILE__, __LINE__,
      fmt::format("{}: the {} backend has no kernel for this mixture-of-experts op yet", op, be.name()),
      "train the MoE model with --device cpu for now, or a dense model on this device");
}

}  // namespace

void Backend::moe_router_topk(Tensor& probs, Tensor& indices, const Tensor& logits, const Tensor* expert_bias,
                              const MoeRouting& r) {
  Checks k(*this, "moe_router_topk");
  const DType st = stat_of(k, logits, "logits");
  router_shapes(k, logits, indices, r.topk);
  const int64_t N = logits.size(0), E = logits.size(1);
  k.stat(probs, "probs", st, N * r.topk, "N * k");
  if (expert_bias) {
    k.that(r.sigmoid, "expert_bias is given but the score function is softmax (the bias is DeepSeek-V3's, sigmoid)");
    k.stat(*expert_bias, "expert_bias", st, E, "E");
  }
  moe_router_topk_impl(probs, indices, logits, expert_bias, r);
}

void Backend::moe_router_topk_backward(Tensor& dlogits, const Tensor& dprobs, const Tensor& logits,
                                       const Tensor& indices, const MoeRouting& r) {
  Checks k(*this, "moe_router_topk_backward");
  const DType st = stat_of(k, logits, "logits");
  router_shapes(k, logits, indices, r.topk);
  k.stat(dlogits, "dlogits", st, logits.numel(), "N * E");
  k.stat(dprobs, "dprobs", st, logits.size(0) * r.topk, "N * k");
  moe_router_topk_backward_impl(dlogits, dprobs, logits, indices, r);
}

void Backend::moe_aux_loss(Tensor* dlogits, Tensor& losses, const Tensor& logits, const MoeAuxLoss& a) {
  Checks k(*this, "moe_aux_loss");
  const DType st = stat_of(k, logits, "logits");
  k.dim(logits, "logits", 2, "(N, E)");
  const int64_t N = logits.size(0), E = logits.size(1);
  k.that(a.topk >= 1 && a.topk <= E, fmt::format("topk {} must be in [1, E = {}]", a.topk, E));
  k.that(a.seq_length == 0 || (a.seq_length > 0 && N % a.seq_length == 0),
         fmt::format("seq_length {} must divide N = {} (whole sequences)", a.seq_length, N));
  k.stat(losses, "losses", st, 2, "[aux, z]");
  if (dlogits) k.stat(*dlogits, "dlogits", st, N * E, "N * E");
  moe_aux_loss_impl(dlogits, losses, logits, a);
}

void Backend::moe_permute_map(Tensor& row_map, Tensor& tokens_per_expert, const Tensor& indices,
                              const Tensor& probs, int64_t num_experts, int64_t capacity, bool drop_by_probs) {
  Checks k(*this, "moe_permute_map");
  k.dtype(indices, "indices", DType::I32, "expert indices");
  stat_of(k, probs, "probs");
  k.numel(probs, "probs", indices.numel(), "one per slot, as indices");
  k.ids(row_map, "row_map", indices.numel(), "N * k slots");
  k.ids(tokens_per_expert, "tokens_per_expert", num_experts, "E");
  k.that(num_experts >= 1, fmt::format("num_experts {} must be >= 1", num_experts));
  moe_permute_map_impl(row_map, tokens_per_expert, indices, probs, num_experts, capacity, drop_by_probs);
}

namespace {
void row_op_shapes(const Checks& k, const Tensor& rows, const Tensor& tokens, const Tensor& row_map, int topk,
                   const char* rows_name, const char* tokens_name) {
  const DType dt = k.act(tokens, tokens_name);
  k.dim(tokens, tokens_name, 2, "(N, C)");
  k.dtype(rows, rows_name, dt, "the activation dtype");
  k.dim(rows, rows_name, 2, "(R, C)");
  k.that(rows.size(1) == tokens.size(1),
         fmt::format("{} {} and {} {} must have the same width C", rows_name, rows.str(), tokens_name, tokens.str()));
  k.that(topk >= 1, fmt::format("topk {} must be >= 1", topk));
  k.ids(row_map, "row_map", rows.size(0), "R, one per row");
  k.that(rows.size(0) <= tokens.size(0) * topk,
         fmt::format("{} {} has more rows than the N * k = {} slots", rows_name, rows.str(), tokens.size(0) * topk));
}
}  // namespace

void Backend::moe_permute(Tensor& out, const Tensor& inp, const Tensor& row_map, int topk) {
  Checks k(*this, "moe_permute");
  row_op_shapes(k, out, inp, row_map, topk, "out", "inp");
  moe_permute_impl(out, inp, row_map, topk);
}

void Backend::moe_permute_backward(Tensor& dinp, const Tensor& dout, const Tensor& row_map, int topk) {
  Checks k(*this, "moe_permute_backward");
  row_op_shapes(k, dout, dinp, row_map, topk, "dout", "dinp");
  moe_permute_backward_impl(dinp, dout, row_map, topk);
}

void Backend::moe_unpermute(Tensor& out, const Tensor& inp, const Tensor& row_map, const Tensor& probs) {
  Checks k(*this, "moe_unpermute");
  const int topk = probs.dim() == 2 ? static_cast<int>(probs.size(1)) : 0;
  row_op_shapes(k, inp, out, row_map, topk, "inp", "out");
  k.stat(probs, "probs", out.dtype(), out.size(0) * topk, "(N, k)");
  moe_unpermute_impl(out, inp, row_map, probs);
}

void Backend::moe_unpermute_backward(Tensor& dinp, Tensor& dprobs, const Tensor& dout, const Tensor& inp,
                                     const Tensor& row_map, const Tensor& probs) {
  Checks k(*this, "moe_unpermute_backward");
  const int topk = probs.dim() == 2 ? static_cast<int>(probs.size(1)) : 0;
  row_op_shapes(k, inp, dout, row_map, topk, "inp", "dout");
  k.stat(probs, "probs", dout.dtype(), dout.size(0) * topk, "(N, k)");
  k.stat(dprobs, "dprobs", dout.dtype(), probs.numel(), "as probs");
  k.like(dinp, "dinp", dout.dtype(), inp.numel(), "as inp (R, C)");
  moe_unpermute_backward_impl(dinp, dprobs, dout, inp, row_map, probs);
}

namespace {
// out (R, OC) = inp (R, C) @ weights^T by groups: the weights' shapes and dtypes, and the rows' sum.
void grouped_shapes(const Checks& k, const Tensor& out, const Tensor& inp, const std::vector<const Tensor*>& weights,
                    const std::vector<int64_t>& rows, const char* out_name, const char* inp_name, bool forward) {
  k.on_device(out, out_name);
  k.on_device(inp, inp_name);
  k.dim(out, out_name, 2, "(R, N)");
  k.dim(inp, inp_name, 2, "(R, K)");
  k.that(weights.size() == rows.size(),
         fmt::format("{} weights for {} row counts (one of each per group)", weights.size(), rows.size()));
  k.that(out.size(0) == inp.size(0), fmt::format("{} {} and {} {} must have the same rows", out_name, out.str(),
                                                 inp_name, inp.str()));
  k.that(out.dtype() == inp.dtype(), fmt::format("{} {} must have {}'s dtype", out_name, out.str(), inp_name));
  int64_t total = 0;
  for (size_t g = 0; g < rows.size(); ++g) {
    k.that(rows[g] >= 0, fmt::format("group {} has {} rows", g, rows[g]));
    total += rows[g];
    if (!weights[g]) continue;
    const Tensor& w = *weights[g];
    k.on_device(w, "weights[g]");
    k.dim(w, "weights[g]", 2, "(OC, C)");
    k.that(w.dtype() == inp.dtype(), fmt::format("weights[{}] {} must have {}'s dtype", g, w.str(), inp_name));
    const int64_t want_out = forward ? w.size(0) : w.size(1), want_in = forward ? w.size(1) : w.size(0);
    k.that(out.size(1) == want_out && inp.size(1) == want_in,
           fmt::format("weights[{}] {} does not map {} {} to {} {}", g, w.str(), inp_name, inp.str(), out_name,
                       out.str()));
  }
  k.that(total <= inp.size(0), fmt::format("the groups' {} rows exceed {} {}", total, inp_name, inp.str()));
}
}  // namespace

void Backend::grouped_matmul_forward(Tensor& out, const Tensor& inp, const std::vector<const Tensor*>& weights,
                                     const std::vector<int64_t>& rows) {
  Checks k(*this, "grouped_matmul_forward");
  grouped_shapes(k, out, inp, weights, rows, "out", "inp", true);
  grouped_matmul_forward_impl(out, inp, weights, rows);
}

void Backend::grouped_matmul_backward_data(Tensor& dinp, const Tensor& dout, const std::vector<const Tensor*>& weights,
                                           const std::vector<int64_t>& rows) {
  Checks k(*this, "grouped_matmul_backward_data");
  grouped_shapes(k, dinp, dout, weights, rows, "dinp", "dout", false);
  grouped_matmul_backward_data_impl(dinp, dout, weights, rows);
}

void Backend::grouped_matmul_forward_impl(Tensor& out, const Tensor& inp, const std::vector<const Tensor*>& weights,
                                          const std::vector<int64_t>& rows) {
  int64_t at = 0;
  for (size_t g = 0; g < rows.size(); at += rows[g], ++g) {
    if (!weights[g] || rows[g] == 0) continue;
    Tensor o = out.narrow(at, rows[g]);
    matmul_forward(o, inp.narrow(at, rows[g]), *weights[g], nullptr);
  }
}

void Backend::grouped_matmul_backward_data_impl(Tensor& dinp, const Tensor& dout,
                                                const std::vector<const Tensor*>& weights,
                                                const std::vector<int64_t>& rows) {
  int64_t at = 0;
  for (size_t g = 0; g < rows.size(); at += rows[g], ++g) {
    if (!weights[g] || rows[g] == 0) continue;
    Tensor d = dinp.narrow(at, rows[g]);
    matmul_backward(&d, nullptr, nullptr, dout.narrow(at, rows[g]), d, *weights[g]);  // inp: its shape (no dweight asked)
  }
}

// ---- defaults: no kernel ----

void Backend::moe_router_topk_impl(Tensor&, Tensor&, const Tensor&, const Tensor*, const MoeRouting&) {
  missing(*this, "moe_router_topk");
}
void Backend::moe_router_topk_backward_impl(Tensor&, const Tensor&, const Tensor&, const Tensor&, const MoeRouting&) {
  missing(*this, "moe_router_topk_backward");
}
void Backend::moe_aux_loss_impl(Tensor*, Tensor&, const Tensor&, const MoeAuxLoss&) { missing(*this, "moe_aux_loss"); }
void Backend::moe_permute_map_impl(Tensor&, Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, bool) {
  missing(*this, "moe_permute_map");
}
void Backend::moe_permute_impl(Tensor&, const Tensor&, const Tensor&, int) { missing(*this, "moe_permute"); }
void Backend::moe_permute_backward_impl(Tensor&, const Tensor&, const Tensor&, int) {
  missing(*this, "moe_permute_backward");
}
void Backend::moe_unpermute_impl(Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  missing(*this, "moe_unpermute");
}
void Backend::moe_unpermute_backward_impl(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                          const Tensor&) {
  missing(*this, "moe_unpermute_backward");
}

}  // namespace tripod::backend
