// Test helpers: compare a tensor against a reference, report max-abs,
// max-rel (against the reference's largest magnitude) and NMSE, and print the
// first elements OK / NOT OK on failure (llm.c's test_gpt2 style).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace tripod::testing {

struct CloseReport {
  double max_abs = 0, ref_max = 0, nmse = 0;
  double rel() const { return ref_max > 0 ? max_abs / ref_max : max_abs; }
};

template <typename A, typename B>
CloseReport compare(const A* got, const B* ref, size_t n) {
  CloseReport r;
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - static_cast<double>(ref[i]));
    r.max_abs = std::isnan(d) ? INFINITY : std::max(r.max_abs, d);
    r.ref_max = std::max(r.ref_max, std::abs(static_cast<double>(ref[i])));
    err2 += d * d;
    ref2 += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  r.nmse = ref2 > 0 ? err2 / ref2 : err2;
  return r;
}

// EXPECTs max|got - ref| <= tol * max|ref|; prints the first elements on failure.
template <typename A, typename B>
bool expect_close(const std::string& what, const A* got, const B* ref, size_t n, double tol) {
  CloseReport r = compare(got, ref, n);
  const bool ok = r.rel() <= tol;
  EXPECT_TRUE(ok) << what << ": max-abs " << r.max_abs << " max-rel " << r.rel() << " nmse " << r.nmse
                  << " (tol " << tol << ", n " << n << ")";
  if (!ok)
    for (size_t i = 0; i < std::min<size_t>(n, 5); ++i)
      std::printf("  %s[%zu]: got %.9g ref %.9g %s\n", what.c_str(), i, static_cast<double>(got[i]),
                  static_cast<double>(ref[i]),
                  std::abs(static_cast<double>(got[i]) - static_cast<double>(ref[i])) <= tol * r.ref_max
                      ? "OK" : "NOT OK");
  return ok;
}

}  // namespace tripod::testing
