// Implementation of harness.h: input generation and rounding, upload to both
// backends, NaN poisoning, the reference run in f64, and the comparison.
#include "harness.h"

#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "base/error.h"

namespace tripod::testing {

double tolerance(DType act) {
  switch (act) {
    case DType::F32: return 1e-9;   // ||err||/||ref|| ~ 3e-5: far under the 1e-3 of the issue
    case DType::F16: return 1e-5;   // ~ 3e-3 relative
    case DType::BF16: return 1e-4;  // ~ 1e-2 relative (8 mantissa bits: output rounding is ~2e-3)
    default: TRIPOD_FAIL("no tolerance for dtype {}", dtype_name(act));
  }
}

namespace {

DType target_dtype(Kind k, DType act) {
  switch (k) {
    case Kind::Act: return act;
    case Kind::F32: return DType::F32;
    case Kind::Ids: return DType::I32;
    case Kind::E4M3: return DType::E4M3;
    case Kind::E5M2: return DType::E5M2;
  }
  return act;
}
DType ref_dtype(Kind k) {
  return k == Kind::Ids || k == Kind::E4M3 || k == Kind::E5M2 ? target_dtype(k, DType::F64) : DType::F64;
}

// An FP8 code's value, NaN with the code's sign (so 0x7f and 0xff differ).
double fp8_value(uint8_t c, DType d) {
  const double v = fp8_to_f32(c, d);
  return std::isnan(v) ? std::copysign(v, c & 0x80 ? -1.0 : 1.0) : v;
}

// Value after a round trip through dtype d (what the target can hold).
double round_to(double x, DType d) {
  switch (d) {
    case DType::F32: return static_cast<float>(x);
    case DType::BF16: return bf16_to_f32(f32_to_bf16(static_cast<float>(x)));
    case DType::F16: return f16_to_f32(f32_to_f16(static_cast<float>(x)));
    case DType::I32: return static_cast<int32_t>(x);
    case DType::E4M3: case DType::E5M2: return fp8_value(f32_to_fp8(static_cast<float>(x), d), d);
    default: return x;
  }
}

Tensor host_from(const std::vector<double>& v, const Shape& shape, DType d) {
  Tensor t = Tensor::empty(shape, d);
  for (size_t i = 0; i < v.size(); ++i) {
    switch (d) {
      case DType::F32: t.data<float>()[i] = static_cast<float>(v[i]); break;
      case DType::F64: t.data<double>()[i] = v[i]; break;
      case DType::BF16: t.data_u16()[i] = f32_to_bf16(static_cast<float>(v[i])); break;
      case DType::F16: t.data_u16()[i] = f32_to_f16(static_cast<float>(v[i])); break;
      case DType::I32: t.data<int32_t>()[i] = static_cast<int32_t>(v[i]); break;
      case DType::E4M3: case DType::E5M2:
        static_cast<uint8_t*>(t.raw())[i] = f32_to_fp8(static_cast<float>(v[i]), d);
        break;
      default: TRIPOD_FAIL("harness: dtype {}", dtype_name(d));
    }
  }
  return t;
}

std::vector<double> to_host(backend::Backend& be, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  be.copy(h, t);
  be.synchronize();
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t.dtype()) {
      case DType::F32: v[i] = h.data<float>()[i]; break;
      case DType::F64: v[i] = h.data<double>()[i]; break;
      case DType::BF16: v[i] = bf16_to_f32(h.data_u16()[i]); break;
      case DType::F16: v[i] = f16_to_f32(h.data_u16()[i]); break;
      case DType::I32: v[i] = h.data<int32_t>()[i]; break;
      case DType::E4M3: case DType::E5M2: v[i] = fp8_value(static_cast<uint8_t*>(h.raw())[i], t.dtype()); break;
      default: TRIPOD_FAIL("harness: dtype {}", dtype_name(t.dtype()));
    }
  }
  return v;
}

void upload(backend::Backend& be, Tensor& dst, const std::vector<double>& v) {
  Tensor h = host_from(v, dst.shape(), dst.dtype());
  be.copy(dst, h);
  be.synchronize();
}

std::vector<double> generate(const ArgSpec& a, std::mt19937_64& rng) {
  std::vector<double> v(static_cast<size_t>(shape_numel(a.shape)));
  if (a.kind == Kind::Ids) {
    std::uniform_int_distribution<int64_t> d(a.lo, a.hi - 1);
    for (auto& x : v) x = static_cast<double>(d(rng));
    return v;
  }
  std::normal_distribution<double> n(0.0, 1.0);
  for (auto& x : v) {
    double z = n(rng);
    x = a.shift + a.scale * (a.positive ? std::fabs(z) : z);
  }
  return v;
}

struct Metrics {
  double nmse = 0, max_abs = 0, max_rel = 0;
  int64_t bad = 0;  // non-finite where the reference is finite (exact: any element that differs)
};

// Bit-for-bit equality of two values: NaN to NaN of the same sign, zeros of the same sign.
bool same_bits(double a, double b) {
  if (std::signbit(a) != std::signbit(b)) return false;
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

Metrics compare(const std::vector<double>& got, const std::vector<double>& ref, bool exact) {
  Metrics m;
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (exact) {
      m.bad += !same_bits(got[i], ref[i]);
      if (!std::isfinite(got[i]) || !std::isfinite(ref[i])) continue;
    } else if (!std::isfinite(got[i]) && std::isfinite(ref[i])) {
      ++m.bad;
      continue;
    }
    double e = std::fabs(got[i] - ref[i]);
    err2 += e * e;
    ref2 += ref[i] * ref[i];
    m.max_abs = std::max(m.max_abs, e);
    m.max_rel = std::max(m.max_rel, e / std::max(std::fabs(ref[i]), 1e-6));
  }
  m.nmse = ref2 > 0 ? err2 / ref2 : err2;
  return m;
}

}  // namespace

CaseResult run_case(const OpCase& c, backend::Backend& target, DType act, backend::Backend& ref,
                    uint64_t seed) {
  std::mt19937_64 rng(seed);
  const size_t n = c.args.size();
  std::vector<std::vector<double>> init(n);
  Args ta(n), ra(n);
  for (size_t i = 0; i < n; ++i) {
    const ArgSpec& a = c.args[i];
    ra[i] = ref.empty(a.shape, ref_dtype(a.kind));
    ta[i] = target.empty(a.shape, target_dtype(a.kind, act));
    if (a.role != Role::Out) {
      init[i] = generate(a, rng);
      for (auto& x : init[i]) x = round_to(x, ta[i].dtype());
      upload(ref, ra[i], init[i]);
    }
  }
  if (c.prepare) {
    c.prepare(ref, ra);
    for (size_t i = 0; i < n; ++i)
      if (c.args[i].role != Role::Out) {
        init[i] = to_host(ref, ra[i]);
        for (auto& x : init[i]) x = round_to(x, ta[i].dtype());
      }
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (size_t i = 0; i < n; ++i) {
    if (c.args[i].role == Role::Out) {
      std::vector<double> poison(static_cast<size_t>(ta[i].numel()), nan);
      if (c.args[i].kind == Kind::Ids) poison.assign(poison.size(), -1.0);
      upload(target, ta[i], poison);
      upload(ref, ra[i], poison);
    } else {
      upload(target, ta[i], init[i]);
      upload(ref, ra[i], init[i]);
    }
  }
  c.run(ref, ra);
  c.run(target, ta);
  target.synchronize();

  CaseResult r;
  const double tol = c.exact ? 0.0 : c.gate ? c.gate(act) : tolerance(act) * c.tol_scale;
  for (size_t i = 0; i < n; ++i) {
    if (c.args[i].role == Role::In) continue;
    std::vector<double> got = to_host(target, ta[i]), want = to_host(ref, ra[i]);
    if (c.exact)  // the reference, rounded as the target stores it
      for (auto& x : want) x = round_to(x, ta[i].dtype());
    Metrics m = compare(got, want, c.exact);
    const double bound = c.bound ? c.bound(i, want) : 0.0;
    bool ok = m.bad == 0 && (c.bound ? m.max_abs <= bound : m.nmse <= tol);
    r.ok = r.ok && ok;
    const std::string limit =
        c.bound ? fmt::format("(max_abs bound {:.3e})", bound) : fmt::format("(tol {:.0e})", tol);
    r.summary += fmt::format("  {:<8} {} nmse={:.3e} {} max_abs={:.3e} max_rel={:.3e}{}\n",
                             c.args[i].name, ok ? "OK    " : "NOT OK", m.nmse, limit, m.max_abs,
                             m.max_rel, m.bad ? fmt::format(" {}={}", c.exact ? "differ" : "non-finite", m.bad) : "");
    if (!ok && c.exact) {
      int shown = 0;
      for (size_t k = 0; k < got.size() && shown < 8; ++k)
        if (!same_bits(got[k], want[k]))
          r.detail += fmt::format("    {}[{}] got {:.8g} want {:.8g} NOT OK\n", c.args[i].name, k, got[k],
                                  want[k]), ++shown;
    } else if (!ok && c.bound) {
      int shown = 0;
      for (size_t k = 0; k < got.size() && shown < 8; ++k)
        if (!(std::fabs(got[k] - want[k]) <= bound))
          r.detail += fmt::format("    {}[{}] got {:.8g} want {:.8g} NOT OK\n", c.args[i].name, k, got[k],
                                  want[k]), ++shown;
    } else if (!ok)
      for (size_t k = 0; k < std::min<size_t>(8, got.size()); ++k)
        r.detail += fmt::format("    {}[{}] got {:.8g} want {:.8g} {}\n", c.args[i].name, k,
                                got[k], want[k],
                                std::fabs(got[k] - want[k]) <= 1e-2 * std::fabs(want[k]) + 1e-6
                                    ? "OK" : "NOT OK");
  }
  return r;
}

}  // namespace tripod::testing
