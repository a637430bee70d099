// The public ops the Llama family adds to backend/ops.h (RMSNorm, rotary
// position embedding, SwiGLU): their validators, shared by every backend,
// then the backend's <op>_impl; and the default _impl of the fused
// residual + RMSNorm (add then rmsnorm_forward). Grouped-query attention
// goes through the attention ops of ops.cpp.
#include <cmath>

#include "backend/checks.h"
#include "backend/ops.h"

namespace tripod::backend {
namespace {

using namespace checks;

// Shared by rmsnorm_forward and fused_residual_rmsnorm_forward.
void check_rmsnorm_forward(const Checks& k, const Tensor& out, const Tensor& rstd, const Tensor& inp,
                           const char* inp_name, const Tensor& weight) {
  const DType dt = k.act(inp, inp_name);
  const int64_t C = inp.size(-1), N = rows_of(inp);
  k.like(out, "out", dt, inp.numel(), fmt::format("as many as {}", inp_name).c_str());
  k.wide(weight, "weight", dt, C, fmt::format("the width C of {}", inp_name).c_str());
  k.stat(rstd, "rstd", dt, N, fmt::format("one per row of {}", inp_name).c_str());
}

// Shared by rope_forward and rope_backward.
void check_rope(const Checks& k, const Tensor& qkv, const char* name, int n_head, int n_kv_head,
                int64_t rot_dim, float base) {
  const Heads h = check_qkv(k, qkv, n_head, n_kv_head, name);
  k.that(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= h.HS,
         fmt::format("rot_dim = {} must be even, > 0 and <= the head size HS = {} of {} {}", rot_dim, h.HS,
                     name, qkv.str()));
  k.that(std::isfinite(base) && base > 0.f, fmt::format("base = {} must be a positive rotary base", base));
}

}  // namespace

// ---- RMSNorm ----

void Backend::rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps) {
  check_rmsnorm_forward(Checks(*this, "rmsnorm_forward"), out, rstd, inp, "inp", weight);
  rmsnorm_forward_impl(out, rstd, inp, weight, eps);
}

void Backend::rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                               const Tensor& weight, const Tensor& rstd) {
  Checks k(*this, "rmsnorm_backward");
  const DType dt = k.act(inp, "inp");
  const int64_t C = inp.size(-1), N = rows_of(inp);
  k.like(dinp, "dinp", dt, inp.numel(), "as many as inp");
  k.like(dout, "dout", dt, inp.numel(), "as many as inp");
  k.wide(weight, "weight", dt, C, "the width C of inp");
  k.wide(dweight, "dweight", dt, C, "the width C of inp");
  k.stat(rstd, "rstd", dt, N, "one per row of inp");
  rmsnorm_backward_impl(dinp, dweight, dout, inp, weight, rstd);
}

void Backend::fused_residual_rmsnorm_forward(Tensor& residual, Tensor& out, Tensor& rstd, const Tensor& a,
                                             const Tensor& b, const Tensor& weight, float eps) {
  Checks k(*this, "fused_residual_rmsnorm_forward");
  const DType dt = k.act(a, "a");
  k.like(b, "b", dt, a.numel(), "as many as a");
  k.like(residual, "residual", dt, a.numel(), "as many as a");
  k.that(residual.size(-1) == a.size(-1),
         fmt::format("residual {} and a {} must have one width C", residual.str(), a.str()));
  check_rmsnorm_forward(k, out, rstd, residual, "residual", weight);
  fused_residual_rmsnorm_forward_impl(residual, out, rstd, a, b, weight, eps);
}

void Backend::fused_residual_rmsnorm_forward_impl(Tensor& residual, Tensor& out, Tensor& rstd, const Tensor& a,
                                                  const Tensor& b, const Tensor& weight, float eps) {
  add_impl(residual, a, b);
  rmsnorm_forward_impl(out, rstd, residual, weight, eps);
}

// ---- rotary position embedding ----

void Backend::rope_forward(Tensor& qkv, int n_head, int n_kv_head, int64_t rot_dim, float base,
                           const Tensor* positions) {
  Checks k(*this, "rope_forward");
  check_rope(k, qkv, "qkv", n_head, n_kv_head, rot_dim, base);
  if (positions) {
    k.ids(*positions, "positions", qkv.size(1), "one per row t of qkv (B, T, *)");
    rope_positions_impl(qkv, n_head, n_kv_head ? n_kv_head : n_head, rot_dim, base, false, *positions);
  } else {
    rope_impl(qkv, n_head, n_kv_head ? n_kv_head : n_head, rot_dim, base, false);
  }
}

void Backend::rope_backward(Tensor& dqkv, int n_head, int n_kv_head, int64_t rot_dim, float base,
                            const Tensor* positions) {
  Checks k(*this, "rope_backward");
  check_rope(k, dqkv, "dqkv", n_head, n_kv_head, rot_dim, base);
  if (positions) {
    k.ids(*positions, "positions", dqkv.size(1), "one per row t of dqkv (B, T, *)");
    rope_positions_impl(dqkv, n_head, n_kv_head ? n_kv_head : n_head, rot_dim, base, true, *positions);
  } else {
    rope_impl(dqkv, n_head, n_kv_head ? n_kv_head : n_head, rot_dim, base, true);
  }
}

// ---- SwiGLU ----

void Backend::swiglu_forward(Tensor& out, const Tensor& inp) {
  Checks k(*this, "swiglu_forward");
  const DType dt = k.act(inp, "inp");
  k.that(inp.dim() >= 1 && inp.size(-1) % 2 == 0,
         fmt::format("inp {} must be (N, 2F): [gate | up], an even width", inp.str()));
  k.like(out, "out", dt, inp.numel() / 2, "N * F (half of inp)");
  k.that(out.size(-1) == inp.size(-1) / 2,
         fmt::format("out {} must have width F = {} (half the width of inp {})", out.str(), inp.size(-1) / 2,
                     inp.str()));
  swiglu_forward_impl(out, inp);
}

void Backend::swiglu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  Checks k(*this, "swiglu_backward");
  const DType dt = k.act(inp, "inp");
  k.that(inp.dim() >= 1 && inp.size(-1) % 2 == 0,
         fmt::format("inp {} must be (N, 2F): [gate | up], an even width", inp.str()));
  k.like(dinp, "dinp", dt, inp.numel(), "as many as inp");
  k.like(dout, "dout", dt, inp.numel() / 2, "N * F (half of inp)");
  k.that(dout.size(-1) == inp.size(-1) / 2,
         fmt::format("dout {} must have width F = {} (half the width of inp {})", dout.str(), inp.size(-1) / 2,
                     inp.str()));
  swiglu_backward_impl(dinp, inp, dout);
}

}  // namespace tripod::backend
