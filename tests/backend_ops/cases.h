// Builders shared by the case files of the backend_ops harness.
#pragma once

#include "harness.h"

namespace tripod::testing {

inline ArgSpec in(std::string name, Shape s, Kind k = Kind::Act, double scale = 1.0,
                  double shift = 0.0) {
  return {std::move(name), std::move(s), Role::In, k, scale, shift};
}
inline ArgSpec positive(std::string name, Shape s, Kind k, double scale = 1.0) {
  ArgSpec a{std::move(name), std::move(s), Role::In, k, scale};
  a.positive = true;
  return a;
}
inline ArgSpec out(std::string name, Shape s, Kind k = Kind::Act) {
  return {std::move(name), std::move(s), Role::Out, k};
}
inline ArgSpec acc(std::string name, Shape s, Kind k = Kind::Act, bool pos = false) {
  ArgSpec a{std::move(name), std::move(s), Role::Acc, k};
  a.positive = pos;
  return a;
}
inline ArgSpec ids(std::string name, Shape s, int64_t lo, int64_t hi) {
  ArgSpec a{std::move(name), std::move(s), Role::In, Kind::Ids};
  a.lo = lo;
  a.hi = hi;
  return a;
}

void add_layer_cases(std::vector<OpCase>& cases);      // cases_layers.cpp
void add_attention_cases(std::vector<OpCase>& cases);  // cases_attention.cpp
void add_fused_cases(std::vector<OpCase>& cases);      // cases_fused.cpp
void add_llama_cases(std::vector<OpCase>& cases);      // cases_llama.cpp
void add_fp8_cases(std::vector<OpCase>& cases);        // cases_fp8.cpp
void add_fp8_attention_cases(std::vector<OpCase>& cases);  // cases_fp8_attention.cpp
void add_context_parallel_cases(std::vector<OpCase>& cases);  // cases_context_parallel.cpp
void add_moe_cases(std::vector<OpCase>& cases);       // cases_moe.cpp

}  // namespace tripod::testing
