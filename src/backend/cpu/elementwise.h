// Elementwise reference kernels of the CPU backend (see elementwise.cpp).
#pragma once

#include <cstdint>

namespace tripod::backend::cpu {

template <typename T> void add(T* out, const T* a, const T* b, int64_t n);
template <typename T> void scale(T* x, double s, int64_t n);
template <typename T> void add_bias(T* out, const T* bias, int64_t N, int64_t OC);
template <typename T>
void dropout(T* out, const T* inp, int64_t n, float p, uint64_t seed, uint64_t offset);
template <typename T> double sum_squares(const T* x, int64_t n);

}  // namespace tripod::backend::cpu
