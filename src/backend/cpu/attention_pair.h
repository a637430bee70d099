// The reference attention's backward for one (query row, key row) pair,
// shared by the whole-sequence kernel (attention.cpp) and the ring's block
// kernel (attention_block.cpp) so both accumulate in the same order:
//   p = exp(q.k * scale - lse),  ds = p (dout.v - D) * scale,
//   dv += p dout,  dq += ds k,  dk += ds q   (D = dout.out of the query row)
#pragma once

#include <cmath>
#include <cstdint>

namespace tripod::backend::cpu {

template <typename T>
inline void attention_pair_backward(const T* q, const T* k, const T* v, const T* dot, double D, double lse,
                                    double scale, int64_t HS, double* dq, double* dk, double* dv) {
  double sdot = 0, dp = 0;
  for (int64_t e = 0; e < HS; ++e) {
    sdot += static_cast<double>(q[e]) * k[e];
    dp += static_cast<double>(dot[e]) * v[e];
  }
  const double p = std::exp(sdot * scale - lse);
  const double ds = p * (dp - D) * scale;
  for (int64_t e = 0; e < HS; ++e) {
    dv[e] += p * dot[e];
    dq[e] += ds * k[e];
    dk[e] += ds * q[e];
  }
}

}  // namespace tripod::backend::cpu
