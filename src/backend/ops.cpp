// The public ops of backend/ops.h: one validator per op, shared by every
// backend, then the backend's <op>_impl. Messages name the op and the tensor
// ("matmul_forward: weight must have dtype bf16 (the dtype of inp), got
// f32(96, 40) on cuda:0"), so a wrong call fails the same way on every
// backend. Contiguity needs no check: tensor/ has no strided views (every
// Tensor is a contiguous range of its storage).
//
// Also here: the default _impls of the fused ops, composed of the unfused
// ops (a backend without a fused kernel gives exactly the unfused results).
#include "backend/ops.h"
#include "backend/checks.h"

#include <initializer_list>
#include <utility>

#include "base/error.h"

namespace tripod::backend {
namespace {

using namespace checks;

using Named = std::pair<const Tensor*, const char*>;

// Shared by layernorm_forward and fused_residual_layernorm_forward.
void check_layernorm_forward(const Checks& k, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                             const Tensor& inp, const char* inp_name, const Tensor& weight,
                             const Tensor& bias) {
  const DType dt = k.act(inp, inp_name);
  const int64_t C = inp.size(-1), N = rows_of(inp);
  k.like(out, "out", dt, inp.numel(), "as many as inp");
  k.wide(weight, "weight", dt, C, "the width C of inp");
  k.wide(bias, "bias", dt, C, "the width C of inp");
  k.that(bias.dtype() == weight.dtype(),
         fmt::format("bias {} and weight {} must have one dtype", bias.str(), weight.str()));
  k.stat(mean, "mean", dt, N, "one per row of inp");
  k.stat(rstd, "rstd", dt, N, "one per row of inp");
}

// Shared by matmul_forward and matmul_forward_gelu.
void check_matmul_forward(const Checks& k, const Tensor& out, const Tensor& inp, const Tensor& weight,
                          const Tensor* bias) {
  const DType dt = k.act(inp, "inp");
  k.dtype(weight, "weight", dt, "the dtype of inp");
  k.dim(weight, "weight", 2, "(OC, C)");
  const int64_t C = weight.size(1), OC = weight.size(0);
  k.that(inp.size(-1) == C, fmt::format("inp {} must have width C = {} (weight {} is (OC, C))", inp.str(), C,
                                        weight.str()));
  k.like(out, "out", dt, rows_of(inp) * OC, "N * OC");
  if (bias) k.like(*bias, "bias", dt, OC, "OC");
}

// Shared by matmul_backward and matmul_backward_dgelu (dinp checked by the caller).
void check_matmul_backward(const Checks& k, const Tensor* dweight, const Tensor* dbias, const Tensor& dout,
                           const Tensor& inp, const Tensor& weight) {
  const DType dt = k.act(inp, "inp");
  k.dtype(weight, "weight", dt, "the dtype of inp");
  k.dim(weight, "weight", 2, "(OC, C)");
  const int64_t C = weight.size(1), OC = weight.size(0);
  k.that(inp.size(-1) == C, fmt::format("inp {} must have width C = {} (weight {} is (OC, C))", inp.str(), C,
                                        weight.str()));
  k.like(dout, "dout", dt, rows_of(inp) * OC, "N * OC");
  if (dweight) k.wide(*dweight, "dweight", dt, OC * C, "OC * C");
  if (dbias) k.wide(*dbias, "dbias", dt, OC, "OC");
}

}  // namespace

// ---- memory ----

void Backend::copy(Tensor& dst, const Tensor& src) {
  Checks k(*this, "copy");
  for (auto [t, name] : {Named{&dst, "dst"}, Named{&src, "src"}}) {
    TRIPOD_CHECK(t->defined(), "copy: {} is undefined", name);
    TRIPOD_CHECK(t->is_cpu() || t->device() == device(), "copy: {} must be on the host or on {}, got {}", name,
                 device().str(), t->str());
  }
  k.that(dst.dtype() == src.dtype(), fmt::format("dst {} and src {} must have one dtype", dst.str(), src.str()));
  k.numel(dst, "dst", src.numel(), "as many as src");
  copy_impl(dst, src);
}

void Backend::cast(Tensor& dst, const Tensor& src) {
  Checks k(*this, "cast");
  for (auto [t, name] : {Named{&dst, "dst"}, Named{&src, "src"}}) {
    k.on_device(*t, name);
    k.that(is_float(t->dtype()) && stores(t->dtype()),
           fmt::format("{} must have a floating dtype the {} backend stores, got {}", name, this->name(), t->str()));
  }
  k.numel(dst, "dst", src.numel(), "as many as src");
  cast_impl(dst, src);
}

// ---- elementwise ----

void Backend::add(Tensor& out, const Tensor& a, const Tensor& b) {
  Checks k(*this, "add");
  const DType dt = k.act(out, "out");
  k.like(a, "a", dt, out.numel(), "as many as out");
  k.like(b, "b", dt, out.numel(), "as many as out");
  add_impl(out, a, b);
}

void Backend::scale(Tensor& t, float s) {
  Checks(*this, "scale").act(t, "t");
  scale_impl(t, s);
}

void Backend::add_bias(Tensor& out, const Tensor& bias) {
  Checks k(*this, "add_bias");
  const DType dt = k.act(out, "out");
  k.dtype(bias, "bias", dt, "the dtype of out");
  k.that(out.dim() >= 1 && out.size(-1) == bias.numel(),
         fmt::format("out {} must be (N, OC) with OC = {} (the elements of bias)", out.str(), bias.numel()));
  add_bias_impl(out, bias);
}

// ---- embedding ----

void Backend::embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor* wpe,
                                int64_t vocab_start) {
  Checks k(*this, "embedding_forward");
  k.dtype(tokens, "tokens", DType::I32, "token ids");
  k.dim(tokens, "tokens", 2, "(B, T)");
  const DType dt = k.act(wte, "wte");
  k.dim(wte, "wte", 2, "(V_tp, C)");
  const int64_t T = tokens.size(1), C = wte.size(1);
  k.like(out, "out", dt, tokens.numel() * C, "B * T * C");
  if (wpe) {
    k.dtype(*wpe, "wpe", dt, "the dtype of wte");
    k.dim(*wpe, "wpe", 2, "(max positions, C)");
    k.that(wpe->size(1) == C && wpe->size(0) >= T,
           fmt::format("wpe {} must be (>= T, C) for T = {}, C = {}", wpe->str(), T, C));
  }
  embedding_forward_impl(out, tokens, wte, wpe, vocab_start);
}

void Backend::embedding_backward(Tensor* dwte, Tensor* dwpe, const Tensor& dout, const Tensor& tokens,
                                 int64_t vocab_start) {
  Checks k(*this, "embedding_backward");
  k.dtype(tokens, "tokens", DType::I32, "token ids");
  k.dim(tokens, "tokens", 2, "(B, T)");
  const DType dt = k.act(dout, "dout");
  const int64_t T = tokens.size(1), C = dout.size(-1);
  k.numel(dout, "dout", tokens.numel() * C, "B * T * C");
  if (dwte) {
    k.wide(*dwte, "dwte", dt, dwte->numel(), "(V_tp, C)");
    k.dim(*dwte, "dwte", 2, "(V_tp, C)");
    k.that(dwte->size(1) == C, fmt::format("dwte {} must have width C = {}", dwte->str(), C));
  }
  if (dwpe) {
    k.wide(*dwpe, "dwpe", dt, dwpe->numel(), "(>= T, C)");
    k.dim(*dwpe, "dwpe", 2, "(>= T, C)");
    k.that(dwpe->size(1) == C && dwpe->size(0) >= T,
           fmt::format("dwpe {} must be (>= T, C) for T = {}, C = {}", dwpe->str(), T, C));
  }
  if (dwte && dwpe)
    k.that(dwte->dtype() == dwpe->dtype(),
           fmt::format("dwte {} and dwpe {} must have one dtype", dwte->str(), dwpe->str()));
  embedding_backward_impl(dwte, dwpe, dout, tokens, vocab_start);
}

// ---- layernorm ----

void Backend::layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                                const Tensor& weight, const Tensor& bias, float eps) {
  check_layernorm_forward(Checks(*this, "layernorm_forward"), out, mean, rstd, inp, "inp", weight, bias);
  layernorm_forward_impl(out, mean, rstd, inp, weight, bias, eps);
}

void Backend::layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                 const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                 const Tensor& rstd, Tensor* out, const Tensor* bias) {
  Checks k(*this, "layernorm_backward");
  const DType dt = k.act(inp, "inp");
  const int64_t C = inp.size(-1), N = rows_of(inp);
  k.like(dinp, "dinp", dt, inp.numel(), "as many as inp");
  k.like(dout, "dout", dt, inp.numel(), "as many as inp");
  k.wide(weight, "weight", dt, C, "the width C of inp");
  k.wide(dweight, "dweight", dt, C, "the width C of inp");
  k.wide(dbias, "dbias", dt, C, "the width C of inp");
  k.that(dbias.dtype() == dweight.dtype(),
         fmt::format("dbias {} and dweight {} must have one dtype", dbias.str(), dweight.str()));
  k.stat(mean, "mean", dt, N, "one per row of inp");
  k.stat(rstd, "rstd", dt, N, "one per row of inp");
  k.that((out == nullptr) == (bias == nullptr), "out and bias must be given together (the recomputed output)");
  if (out) {
    k.like(*out, "out", dt, inp.numel(), "as many as inp");
    k.wide(*bias, "bias", dt, C, "the width C of inp");
    k.that(bias->dtype() == weight.dtype(),
           fmt::format("bias {} and weight {} must have one dtype", bias->str(), weight.str()));
  }
  layernorm_backward_impl(dinp, dweight, dbias, dout, inp, weight, mean, rstd, out, bias);
}

void Backend::fused_residual_layernorm_forward(Tensor& residual, Tensor& out, Tensor& mean, Tensor& rstd,
                                               const Tensor& a, const Tensor& b, const Tensor& weight,
                                               const Tensor& bias, float eps) {
  Checks k(*this, "fused_residual_layernorm_forward");
  const DType dt = k.act(a, "a");
  k.like(b, "b", dt, a.numel(), "as many as a");
  k.like(residual, "residual", dt, a.numel(), "as many as a");
  k.that(residual.size(-1) == a.size(-1),
         fmt::format("residual {} and a {} must have one width C", residual.str(), a.str()));
  check_layernorm_forward(k, out, mean, rstd, residual, "residual", weight, bias);
  fused_residual_layernorm_forward_impl(residual, out, mean, rstd, a, b, weight, bias, eps);
}

// ---- matmul ----

void Backend::matmul_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor* bias) {
  check_matmul_forward(Checks(*this, "matmul_forward"), out, inp, weight, bias);
  matmul_forward_impl(out, inp, weight, bias);
}

void Backend::matmul_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                              const Tensor& inp, const Tensor& weight) {
  Checks k(*this, "matmul_backward");
  check_matmul_backward(k, dweight, dbias, dout, inp, weight);
  if (dinp) k.like(*dinp, "dinp", inp.dtype(), inp.numel(), "as many as inp");
  matmul_backward_impl(dinp, dweight, dbias, dout, inp, weight);
}

void Backend::matmul_forward_gelu(Tensor& out, Tensor& pre, const Tensor& inp, const Tensor& weight,
                                  const Tensor* bias) {
  Checks k(*this, "matmul_forward_gelu");
  check_matmul_forward(k, out, inp, weight, bias);
  k.like(pre, "pre", inp.dtype(), out.numel(), "as many as out");
  matmul_forward_gelu_impl(out, pre, inp, weight, bias);
}

void Backend::matmul_backward_dgelu(Tensor& dpre, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                                    const Tensor& inp, const Tensor& weight, const Tensor& pre) {
  Checks k(*this, "matmul_backward_dgelu");
  check_matmul_backward(k, dweight, dbias, dout, inp, weight);
  k.like(pre, "pre", inp.dtype(), inp.numel(), "as many as inp (= gelu(pre))");
  k.like(dpre, "dpre", inp.dtype(), inp.numel(), "as many as inp");
  matmul_backward_dgelu_impl(dpre, dweight, dbias, dout, inp, weight, pre);
}

// ---- GELU ----

void Backend::gelu_forward(Tensor& out, const Tensor& inp) {
  Checks k(*this, "gelu_forward");
  k.like(out, "out", k.act(inp, "inp"), inp.numel(), "as many as inp");
  gelu_forward_impl(out, inp);
}

void Backend::gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  Checks k(*this, "gelu_backward");
  const DType dt = k.act(inp, "inp");
  k.like(dinp, "dinp", dt, inp.numel(), "as many as inp");
  k.like(dout, "dout", dt, inp.numel(), "as many as inp");
  gelu_backward_impl(dinp, inp, dout);
}

// ---- attention ----

void Backend::attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int n_head, int n_kv_head) {
  Checks k(*this, "attention_forward");
  const Heads h = check_qkv(k, qkv, n_head, n_kv_head);
  k.like(out, "out", qkv.dtype(), h.B * h.T * h.q_width(), "B * T * n_head * HS");
  k.stat(lse, "lse", qkv.dtype(), h.B * h.NH * h.T, "B * n_head * T");
  attention_forward_impl(out, lse, qkv, n_head, static_cast<int>(h.G));
}

void Backend::attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                 const Tensor& lse, int n_head, int n_kv_head) {
  Checks k(*this, "attention_backward");
  const Heads h = check_qkv(k, qkv, n_head, n_kv_head);
  k.like(dqkv, "dqkv", qkv.dtype(), qkv.numel(), "as many as qkv");
  k.like(dout, "dout", qkv.dtype(), h.B * h.T * h.q_width(), "B * T * n_head * HS");
  k.like(out, "out", qkv.dtype(), h.B * h.T * h.q_width(), "B * T * n_head * HS");
  k.stat(lse, "lse", qkv.dtype(), h.B * h.NH * h.T, "B * n_head * T");
  attention_backward_impl(dqkv, dout, qkv, out, lse, n_head, static_cast<int>(h.G));
}

// ---- dropout ----

void Backend::dropout_forward(Tensor& out, const Tensor& inp, float p, uint64_t seed, uint64_t offset) {
  Checks k(*this, "dropout_forward");
  k.like(out, "out", k.act(inp, "inp"), inp.numel(), "as many as inp");
  k.that(p >= 0.f && p < 1.f, fmt::format("probability p = {} must lie in [0, 1)", p));
  dropout_forward_impl(out, inp, p, seed, offset);
}

void Backend::dropout_backward(Tensor& dinp, const Tensor& dout, float p, uint64_t seed, uint64_t offset) {
  Checks k(*this, "dropout_backward");
  k.like(dinp, "dinp", k.act(dout, "dout"), dout.numel(), "as many as dout");
  k.that(p >= 0.f && p < 1.f, fmt::format("probability p = {} must lie in [0, 1)", p));
  dropout_backward_impl(dinp, dout, p, seed, offset);
}

// ---- cross entropy ----

void Backend::ce_row_max(Tensor& row_max, const Tensor& logits) {
  Checks k(*this, "ce_row_max");
  k.stat(row_max, "row_max", k.act(logits, "logits"), rows_of(logits), "one per row of logits");
  ce_row_max_impl(row_max, logits);
}

void Backend::ce_row_sums(Tensor& sums, const Tensor& logits, const Tensor& row_max, const Tensor& targets,
                          int64_t vocab_start) {
  Checks k(*this, "ce_row_sums");
  const DType dt = k.act(logits, "logits");
  const int64_t N = rows_of(logits);
  k.stat(sums, "sums", dt, 2 * N, "2 per row of logits");
  k.stat(row_max, "row_max", dt, N, "one per row of logits");
  k.ids(targets, "targets", N, "one per row of logits");
  ce_row_sums_impl(sums, logits, row_max, targets, vocab_start);
}

void Backend::ce_loss(Tensor& losses, const Tensor& sums, const Tensor& row_max) {
  Checks k(*this, "ce_loss");
  k.on_device(row_max, "row_max");
  const DType st = row_max.dtype();
  k.that(st == DType::F32 || (st == DType::F64 && computes_in(DType::F64)),
         fmt::format("row_max {} must be a statistics tensor (f32, or f64 on a backend computing in f64)",
                     row_max.str()));
  const int64_t N = row_max.numel();
  k.dtype(sums, "sums", st, "the dtype of row_max");
  k.numel(sums, "sums", 2 * N, "2 per element of row_max");
  k.dtype(losses, "losses", st, "the dtype of row_max");
  k.numel(losses, "losses", N, "as many as row_max");
  ce_loss_impl(losses, sums, row_max);
}

void Backend::ce_backward(Tensor& dlogits, const Tensor& logits, const Tensor& row_max, const Tensor& sums,
                          const Tensor& targets, int64_t vocab_start, float dloss) {
  Checks k(*this, "ce_backward");
  const DType dt = k.act(logits, "logits");
  const int64_t N = rows_of(logits);
  k.like(dlogits, "dlogits", dt, logits.numel(), "as many as logits");
  k.stat(row_max, "row_max", dt, N, "one per row of logits");
  k.stat(sums, "sums", dt, 2 * N, "2 per row of logits");
  k.ids(targets, "targets", N, "one per row of logits");
  ce_backward_impl(dlogits, logits, row_max, sums, targets, vocab_start, dloss);
}

void Backend::cross_entropy_fused(Tensor& losses, Tensor* dlogits, const Tensor& logits, const Tensor& targets,
                                  float dloss) {
  Checks k(*this, "cross_entropy_fused");
  const DType dt = k.act(logits, "logits");
  const int64_t N = rows_of(logits);
  k.stat(losses, "losses", dt, N, "one per row of logits");
  k.ids(targets, "targets", N, "one per row of logits");
  if (dlogits) k.like(*dlogits, "dlogits", dt, logits.numel(), "as many as logits");
  cross_entropy_fused_impl(losses, dlogits, logits, targets, dloss);
}

// ---- optimizer ----

void Backend::adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWStep& step,
                           Tensor* compute_out) {
  Checks k(*this, "adamw_update");
  k.on_device(param, "param");
  const DType dt = param.dtype();
  k.that(dt == DType::F32 || (dt == DType::F64 && computes_in(DType::F64)),
         fmt::format("param {} must be f32 (master weights; f64 on a backend computing in f64)", param.str()));
  for (auto [t, name] : {Named{&grad, "grad"}, Named{&m, "m"}, Named{&v, "v"}}) {
    k.dtype(*t, name, dt, "the dtype of param");
    k.numel(*t, name, param.numel(), "as many as param");
  }
  k.that(step.step >= 1, fmt::format("step {} must be >= 1 (1-based, for bias correction)", step.step));
  if (!compute_out) {
    adamw_update_impl(param, grad, m, v, step);
    return;
  }
  k.on_device(*compute_out, "compute_out");
  k.that(is_float(compute_out->dtype()) && stores(compute_out->dtype()),
         fmt::format("compute_out must have a floating dtype the {} backend stores, got {}", name(),
                     compute_out->str()));
  k.numel(*compute_out, "compute_out", param.numel(), "as many as param");
  for (auto [t, name] : {Named{&param, "param"}, Named{&grad, "grad"}, Named{&m, "m"}, Named{&v, "v"}})
    k.that(!overlaps(*compute_out, *t), fmt::format("compute_out {} must not overlap {} {}", compute_out->str(),
                                                    name, t->str()));
  adamw_update_cast_impl(param, grad, m, v, step, *compute_out);
}

void Backend::sum_squares(Tensor& acc, const Tensor& x) {
  Checks k(*this, "sum_squares");
  k.stat(acc, "acc", k.act(x, "x"), 1, "one accumulator");
  sum_squares_impl(acc, x);
}

// ---- default _impls of the fused ops: the unfused sequence ----

void Backend::fused_residual_layernorm_forward_impl(Tensor& residual, Tensor& out, Tensor& mean, Tensor& rstd,
                                                    const Tensor& a, const Tensor& b, const Tensor& weight,
                                                    const Tensor& bias, float eps) {
  add_impl(residual, a, b);
  layernorm_forward_impl(out, mean, rstd, residual, weight, bias, eps);
}

void Backend::matmul_forward_gelu_impl(Tensor& out, Tensor& pre, const Tensor& inp, const Tensor& weight,
                                       const Tensor* bias) {
  matmul_forward_impl(pre, inp, weight, bias);
  gelu_forward_impl(out, pre);
}

void Backend::matmul_backward_dgelu_impl(Tensor& dpre, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                                         const Tensor& inp, const Tensor& weight, const Tensor& pre) {
  matmul_backward_impl(&dpre, dweight, dbias, dout, inp, weight);
  gelu_backward_impl(dpre, pre, dpre);  // elementwise: in place is safe
}

void Backend::adamw_update_cast_impl(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                                     const AdamWStep& step, Tensor& compute_out) {
  adamw_update_impl(param, grad, m, v, step);
  cast_impl(compute_out, param);
}

void Backend::cross_entropy_fused_impl(Tensor& losses, Tensor* dlogits, const Tensor& logits,
                                       const Tensor& targets, float dloss) {
  const int64_t N = rows_of(logits);
  const DType st = stat_dtype(logits.dtype());
  Tensor row_max = empty({N}, st), sums = empty({2, N}, st);
  ce_row_max_impl(row_max, logits);
  ce_row_sums_impl(sums, logits, row_max, targets, 0);
  ce_loss_impl(losses, sums, row_max);
  if (dlogits) ce_backward_impl(*dlogits, logits, row_max, sums, targets, 0, dloss);
}

}  // namespace tripod::backend
