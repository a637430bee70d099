// Implementation of model/qk_norm.h.
#include "model/qk_norm.h"

#include "base/error.h"

namespace tripod::model {

QkNormRows QkNormRows::make(backend::Backend& be, int64_t N, int64_t nh, int64_t g) {
  const int64_t H = nh + 2 * g;
  QkNormRows r;
  r.rows_q = N * nh;
  r.rows_k = N * g;
  Tensor qk = Tensor::empty({r.rows_q + r.rows_k}, DType::I32), v = Tensor::empty({r.rows_k}, DType::I32);
  Tensor inv = Tensor::empty({N * H}, DType::I32);
  int32_t *pqk = qk.data<int32_t>(), *pv = v.data<int32_t>(), *pinv = inv.data<int32_t>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = n * H + h;
      int64_t at;  // row of [q | k | v]
      if (h < nh) {
        at = n * nh + h;
        pqk[at] = static_cast<int32_t>(row);
      } else if (h < nh + g) {
        at = r.rows_q + n * g + (h - nh);
        pqk[at] = static_cast<int32_t>(row);
      } else {
        at = r.rows_q + r.rows_k + n * g + (h - nh - g);
        pv[at - r.rows_q - r.rows_k] = static_cast<int32_t>(row);
      }
      pinv[row] = static_cast<int32_t>(at);
    }
  TRIPOD_CHECK(N * H < (int64_t(1) << 31), "--qk-layernorm: {} head rows exceed the i32 row maps", N * H);
  r.qk = be.empty(qk.shape(), DType::I32);
  r.v = be.empty(v.shape(), DType::I32);
  r.inverse = be.empty(inv.shape(), DType::I32);
  be.copy(r.qk, qk);
  be.copy(r.v, v);
  be.copy(r.inverse, inv);
  be.synchronize();  // the host tensors go out of scope
  return r;
}

QkNormActs QkNormActs::make(backend::Backend& be, const config::GptConfig& c, int64_t N, int64_t nh, int64_t g,
                            DType compute) {
  const int64_t rows = N * (nh + g);
  QkNormActs a;
  a.in = be.empty({rows, c.head_size()}, compute);
  a.rstd = be.empty({rows}, backend::stat_dtype(compute));
  if (!c.rmsnorm()) a.mean = be.empty({rows}, backend::stat_dtype(compute));
  return a;
}

namespace {

// Rows [r0, r0 + n) of a (rows[, HS]) tensor.
Tensor rows_of(const Tensor& t, int64_t r0, int64_t n) { return t.defined() ? t.narrow(r0, n) : Tensor{}; }

}  // namespace

void qk_norm_forward(backend::Backend& be, const config::GptConfig& c, const QkNormWeights& w,
                     const QkNormRows& rows, Tensor& qkv, QkNormActs& acts, Tensor& scratch) {
  const int64_t HS = c.head_size(), R = rows.inverse.numel(), rq = rows.rows_q, rk = rows.rows_k;
  Tensor view = qkv.view({R, HS});
  Tensor y = scratch.flat(0, {R, HS});
  be.gather_rows(acts.in, view, rows.qk);
  for (int k = 0; k < 2; ++k) {
    const int64_t r0 = k == 0 ? 0 : rq, n = k == 0 ? rq : rk;
    const Param* weight = k == 0 ? w.q_weight : w.k_weight;
    Tensor out = y.narrow(r0, n), rstd = acts.rstd.narrow(r0, n);
    const Tensor in = acts.in.narrow(r0, n);
    if (c.rmsnorm()) {
      be.rmsnorm_forward(out, rstd, in, weight->compute, c.layernorm_epsilon);
    } else {
      Tensor mean = acts.mean.narrow(r0, n);
      be.layernorm_forward(out, mean, rstd, in, weight->compute, (k == 0 ? w.q_bias : w.k_bias)->compute,
                           c.layernorm_epsilon);
    }
  }
  Tensor yv = y.narrow(rq + rk, rk);
  be.gather_rows(yv, view, rows.v);
  be.gather_rows(view, y, rows.inverse);
}

void qk_norm_backward(backend::Backend& be, const config::GptConfig& c, const QkNormWeights& w,
                      const QkNormRows& rows, Tensor& dqkv, const QkNormActs& acts, Tensor& dout, Tensor& scratch) {
  const int64_t HS = c.head_size(), R = rows.inverse.numel(), rq = rows.rows_q, rk = rows.rows_k;
  Tensor view = dqkv.view({R, HS});
  Tensor z = scratch.flat(0, {R, HS});
  Tensor dy = dout.flat(0, {rq + rk, HS});
  be.gather_rows(dy, view, rows.qk);
  Tensor dqk = z.narrow(0, rq + rk);
  be.zero(dqk);  // the norms' backward adds into dinp
  for (int k = 0; k < 2; ++k) {
    const int64_t r0 = k == 0 ? 0 : rq, n = k == 0 ? rq : rk;
    Param* weight = k == 0 ? w.q_weight : w.k_weight;
    Tensor dinp = z.narrow(r0, n);
    const Tensor d = dy.narrow(r0, n), in = acts.in.narrow(r0, n), rstd = acts.rstd.narrow(r0, n);
    Tensor& dweight = weight->grad;
    if (c.rmsnorm()) {
      be.rmsnorm_backward(dinp, dweight, d, in, weight->compute, rstd);
    } else {
      Param* bias = k == 0 ? w.q_bias : w.k_bias;
      be.layernorm_backward(dinp, dweight, bias->grad, d, in, weight->compute,
                            rows_of(acts.mean, r0, n), rstd);
    }
  }
  Tensor zv = z.narrow(rq + rk, rk);
  be.gather_rows(zv, view, rows.v);
  be.gather_rows(view, z, rows.inverse);
}

}  // namespace tripod::model
