// The validators' building blocks (internal to backend/: ops.cpp,
// ops_llama.cpp). Each Checks names one op; every failure message starts
// "<op>: <tensor> " so a wrong call fails the same way on every backend.
#pragma once

#include <string>

#include "backend/ops.h"
#include "base/error.h"

namespace tripod::backend::checks {

inline bool is_float(DType d) {
  return d == DType::F32 || d == DType::F64 || d == DType::BF16 || d == DType::F16;
}
inline bool is_half(DType d) { return d == DType::BF16 || d == DType::F16; }

// Checks of one call of one op: every failure names the op and the tensor.
class Checks {
 public:
  Checks(const Backend& be, const char* op) : be_(be), op_(op) {}

  // Defined and on this backend's device.
  void on_device(const Tensor& t, const char* name) const {
    TRIPOD_CHECK(t.defined(), "{}: {} is undefined", op_, name);
    TRIPOD_CHECK(t.device() == be_.device(), "{}: {} must be on {} (the {} backend's device), got {}", op_,
                 name, be_.device().str(), be_.name(), t.str());
  }
  // An activation: a floating dtype this backend computes in.
  DType act(const Tensor& t, const char* name) const {
    on_device(t, name);
    TRIPOD_CHECK(is_float(t.dtype()) && be_.computes_in(t.dtype()),
                 "{}: {} must have an activation dtype the {} backend computes in, got {}", op_, name,
                 be_.name(), t.str());
    return t.dtype();
  }
  void dtype(const Tensor& t, const char* name, DType d, const char* why) const {
    on_device(t, name);
    TRIPOD_CHECK(t.dtype() == d, "{}: {} must have dtype {} ({}), got {}", op_, name, dtype_name(d), why,
                 t.str());
  }
  void numel(const Tensor& t, const char* name, int64_t n, const char* what) const {
    TRIPOD_CHECK(t.numel() == n, "{}: {} must have {} elements ({}), got {}", op_, name, n, what, t.str());
  }
  void dim(const Tensor& t, const char* name, int64_t d, const char* what) const {
    TRIPOD_CHECK(t.dim() == d, "{}: {} must be {}, got {}", op_, name, what, t.str());
  }
  // Same dtype as the activations and n elements.
  void like(const Tensor& t, const char* name, DType act, int64_t n, const char* what) const {
    dtype(t, name, act, "the activation dtype");
    numel(t, name, n, what);
  }
  // Statistics: f32, or f64 under f64 activations; n elements.
  void stat(const Tensor& t, const char* name, DType act, int64_t n, const char* what) const {
    dtype(t, name, stat_dtype(act), "statistics are f32, f64 under f64 activations");
    numel(t, name, n, what);
  }
  // Wide: the activation dtype, or f32 under bf16/f16 (fp32 LayerNorm
  // params, fp32 gradient accumulation); n elements.
  void wide(const Tensor& t, const char* name, DType act, int64_t n, const char* what) const {
    on_device(t, name);
    TRIPOD_CHECK(t.dtype() == act || (t.dtype() == DType::F32 && is_half(act)),
                 "{}: {} must have dtype {}{}, got {}", op_, name, dtype_name(act),
                 is_half(act) ? " or f32" : "", t.str());
    numel(t, name, n, what);
  }
  void ids(const Tensor& t, const char* name, int64_t n, const char* what) const {
    dtype(t, name, DType::I32, "token ids");
    numel(t, name, n, what);
  }
  void that(bool cond, const std::string& message) const {
    TRIPOD_CHECK(cond, "{}: {}", op_, message);
  }

 private:
  const Backend& be_;
  const char* op_;
};

inline int64_t rows_of(const Tensor& t) { return t.size(-1) ? t.numel() / t.size(-1) : 0; }

// Whether the bytes of a and b intersect (same device assumed).
inline bool overlaps(const Tensor& a, const Tensor& b) {
  const auto* pa = static_cast<const char*>(a.raw());
  const auto* pb = static_cast<const char*>(b.raw());
  return a.nbytes() && b.nbytes() && pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

// The heads of a qkv(B, T, (NH + 2*G)*HS) tensor: [Q: NH | K: G | V: G].
struct Heads {
  int64_t B = 0, T = 0, NH = 0, G = 0, HS = 0;
  int64_t q_width() const { return NH * HS; }  // the width of out / dout
};

// Checks qkv (called `name` in messages) against n_head query heads and n_kv_head K/V heads (0: n_head)
// and returns the heads (G resolved).
// fp8: qkv holds FP8 codes (FP8 attention) instead of activations.
inline Heads check_qkv(const Checks& k, const Tensor& qkv, int n_head, int n_kv_head,
                       const char* name = "qkv", bool fp8 = false) {
  if (fp8) {
    k.on_device(qkv, name);
    k.that(qkv.dtype() == DType::E4M3, fmt::format("{} {} must hold E4M3 codes", name, qkv.str()));
  } else {
    k.act(qkv, name);
  }
  k.dim(qkv, name, 3, "(B, T, (n_head + 2*n_kv_head)*HS)");
  k.that(n_head > 0 && n_kv_head >= 0,
         fmt::format("n_head = {} must be > 0 and n_kv_head = {} >= 0 (0: n_head)", n_head, n_kv_head));
  const int64_t G = n_kv_head ? n_kv_head : n_head;
  k.that(n_head % G == 0, fmt::format("n_head = {} must be a multiple of n_kv_head = {} (each K/V head "
                                      "serves a group of n_head / n_kv_head query heads)", n_head, G));
  const int64_t heads = n_head + 2 * G, W = qkv.size(2);
  k.that(W % heads == 0 && W > 0,
         fmt::format("{} {} has width {}, which must split into n_head + 2*n_kv_head = {} + 2*{} heads",
                     name, qkv.str(), W, n_head, G));
  return {qkv.size(0), qkv.size(1), n_head, G, W / heads};
}

}  // namespace tripod::backend::checks
