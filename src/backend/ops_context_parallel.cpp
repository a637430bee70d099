// Validators of the context-parallel ops of backend/ops.h (the block
// attention of the K/V ring, the K/V column copy, the row gather of the
// all-to-all) and the default _impls
// that refuse on a backend without their kernels. RoPE at given positions
// is validated with the other RoPE ops (ops_llama.cpp); its default _impl
// is here.
#include <fmt/format.h>

#include <cstdlib>

#include "backend/checks.h"
#include "backend/ops.h"

namespace tripod::backend {

using checks::check_qkv;
using checks::Checks;
using checks::Heads;

namespace {

// kv(B, Tk, 2*G*HS) beside qkv's heads h.
void check_kv(const Checks& k, const Tensor& kv, const char* name, const Heads& h) {
  k.dim(kv, name, 3, "(B, Tk, 2*n_kv_head*HS)");
  k.that(kv.size(0) == h.B && kv.size(2) == 2 * h.G * h.HS,
         fmt::format("{} {} must be (B = {}, Tk, 2*n_kv_head*HS = {})", name, kv.str(), h.B, 2 * h.G * h.HS));
}

void check_block(const Checks& k, const AttentionBlock& b, int64_t Tq, int64_t Tk) {
  k.that(b.q_start >= 0 && b.q_len > 0 && b.q_start + b.q_len <= Tq,
         fmt::format("blk query rows [{}, {}) must lie within the {} rows of qkv", b.q_start, b.q_start + b.q_len, Tq));
  k.that(b.kv_start >= 0 && b.kv_len > 0 && b.kv_start + b.kv_len <= Tk,
         fmt::format("blk K/V rows [{}, {}) must lie within the {} rows of kv", b.kv_start, b.kv_start + b.kv_len, Tk));
  k.that(!b.causal || b.q_len == b.kv_len,
         fmt::format("blk: a causal (diagonal) block needs as many query rows as K/V rows, got {} and {}", b.q_len,
                     b.kv_len));
}

[[noreturn]] void refuse(const Backend& be, const char* op) {
  TRIPOD_CHECK_HINT(false, "run context parallelism (--context-parallel-size > 1) on the CPU backend",
                    "{}: the {} backend has no kernel for it (context parallelism's ring attention)", op,
                    be.name());
  std::abort();
}

}  // namespace

void Backend::attention_kv_copy(Tensor& dst, const Tensor& src, int n_head, int n_kv_head) {
  Checks k(*this, "attention_kv_copy");
  const int64_t G = n_kv_head ? n_kv_head : n_head;
  const bool from_qkv = src.dim() == 3 && dst.dim() == 3 && src.size(2) > dst.size(2);
  const Heads h = check_qkv(k, from_qkv ? src : dst, n_head, n_kv_head, from_qkv ? "src" : "dst");
  const Tensor& kv = from_qkv ? dst : src;
  k.like(kv, from_qkv ? "dst" : "src", (from_qkv ? src : dst).dtype(), h.B * h.T * 2 * G * h.HS,
         "B * T * 2*n_kv_head*HS: the K/V columns of the qkv tensor");
  attention_kv_copy_impl(dst, src, n_head, static_cast<int>(G));
}

void Backend::attention_block_forward(Tensor& out, Tensor& lse, const Tensor& qkv, const Tensor& kv, int n_head,
                                      int n_kv_head, const AttentionBlock& blk, bool accumulate) {
  Checks k(*this, "attention_block_forward");
  const Heads h = check_qkv(k, qkv, n_head, n_kv_head);
  k.dtype(kv, "kv", qkv.dtype(), "the activation dtype");
  check_kv(k, kv, "kv", h);
  check_block(k, blk, h.T, kv.size(1));
  k.like(out, "out", qkv.dtype(), h.B * h.T * h.q_width(), "B * T * n_head * HS");
  k.stat(lse, "lse", qkv.dtype(), h.B * h.NH * h.T, "B * n_head * T");
  attention_block_forward_impl(out, lse, qkv, kv, n_head, static_cast<int>(h.G), blk, accumulate);
}

void Backend::attention_block_backward(Tensor& dqkv, Tensor& dkv, const Tensor& dout, const Tensor& qkv,
                                       const Tensor& kv, const Tensor& out, const Tensor& lse, int n_head,
                                       int n_kv_head, const AttentionBlock& blk) {
  Checks k(*this, "attention_block_backward");
  const Heads h = check_qkv(k, qkv, n_head, n_kv_head);
  k.dtype(kv, "kv", qkv.dtype(), "the activation dtype");
  check_kv(k, kv, "kv", h);
  check_block(k, blk, h.T, kv.size(1));
  k.like(dqkv, "dqkv", qkv.dtype(), qkv.numel(), "as many as qkv");
  k.like(dkv, "dkv", qkv.dtype(), kv.numel(), "as many as kv");
  k.like(dout, "dout", qkv.dtype(), h.B * h.T * h.q_width(), "B * T * n_head * HS");
  k.like(out, "out", qkv.dtype(), h.B * h.T * h.q_width(), "B * T * n_head * HS");
  k.stat(lse, "lse", qkv.dtype(), h.B * h.NH * h.T, "B * n_head * T");
  attention_block_backward_impl(dqkv, dkv, dout, qkv, kv, out, lse, n_head, static_cast<int>(h.G), blk);
}

void Backend::gather_rows(Tensor& out, const Tensor& inp, const Tensor& index) {
  Checks k(*this, "gather_rows");
  k.dim(inp, "inp", 2, "(N, C)");
  k.dim(out, "out", 2, "(R, C)");
  k.dtype(out, "out", inp.dtype(), "inp's dtype");
  k.on_device(inp, "inp");
  k.that(out.size(1) == inp.size(1), fmt::format("out {} and inp {} must have the same row width", out.str(), inp.str()));
  k.dtype(index, "index", DType::I32, "row numbers");
  k.numel(index, "index", out.size(0), "one row number per row of out");
  k.that(!checks::overlaps(out, inp), fmt::format("out {} must not overlap inp {}", out.str(), inp.str()));
  gather_rows_impl(out, inp, index);
}

void Backend::attention_kv_copy_impl(Tensor&, const Tensor&, int, int) { refuse(*this, "attention_kv_copy"); }
void Backend::gather_rows_impl(Tensor&, const Tensor&, const Tensor&) { refuse(*this, "gather_rows"); }
void Backend::attention_block_forward_impl(Tensor&, Tensor&, const Tensor&, const Tensor&, int, int,
                                           const AttentionBlock&, bool) {
  refuse(*this, "attention_block_forward");
}
void Backend::attention_block_backward_impl(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                            const Tensor&, const Tensor&, int, int, const AttentionBlock&) {
  refuse(*this, "attention_block_backward");
}
void Backend::rope_positions_impl(Tensor&, int, int, int64_t, float, bool, const Tensor&) {
  refuse(*this, "rope_forward with positions");
}

}  // namespace tripod::backend
