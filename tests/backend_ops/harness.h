// backend_ops harness (in the spirit of ggml's test-backend-ops): every op is
// a small declarative case (its arguments, their roles and shapes, and a
// call), run on a backend under test and on the CPU backend in float64 from
// the same random inputs. Reports NMSE, max-abs and max-rel per output; the
// NMSE gate is per activation dtype, in one table (tolerance()).
//
// Roles: In (random input, rounded to the tested dtype so both backends see
// identical values), Out (poisoned with NaN before the call, so an unwritten
// element fails), Acc (random initial value that the op adds into; checks
// the += contract). Kinds: Act (the tested dtype: f32, bf16 or f16), F32
// (statistics, parameter gradients, optimizer state: f32 under test, f64 in
// the reference), Ids (i32 token ids in [lo, hi)), E4M3 / E5M2 (FP8 tensors,
// the same dtype on both backends; values saturate to the format's range).
// An exact case compares every output bit for bit with the reference
// rounded to the tested dtype (NaN to NaN of the same sign, signed zeros).
// A case may derive inputs (LayerNorm mean/rstd, attention out/lse, CE row
// max/sums) by running ops on the reference first (`prepare`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/ops.h"

namespace tripod::testing {

enum class Role { In, Out, Acc };
enum class Kind { Act, F32, Ids, E4M3, E5M2 };

struct ArgSpec {
  std::string name;
  Shape shape;
  Role role = Role::In;
  Kind kind = Kind::Act;
  double scale = 1.0, shift = 0.0;  // value = shift + scale * N(0,1) (|.| when positive)
  bool positive = false;
  int64_t lo = 0, hi = 0;           // Ids range [lo, hi)
};

using Args = std::vector<Tensor>;
using OpFn = std::function<void(backend::Backend&, Args&)>;

struct OpCase {
  std::string name;
  std::vector<ArgSpec> args;
  OpFn run;
  OpFn prepare;              // optional: derives In args on the f64 reference
  bool f32_only = false;     // all arguments are f32 state (AdamW): one dtype is enough
  double tol_scale = 1.0;    // multiplies the dtype's NMSE bound (documented per case)
  bool exact = false;        // bit for bit instead of the NMSE gate (the FP8 casts)
  std::function<double(DType)> gate;  // optional: this case's NMSE bound per dtype (documented per case)
  // optional, instead of the NMSE gate: the largest |got - want| allowed in
  // each element of output argument i, given the reference's values of it
  // (`want`, as the target stores them; documented per case).
  std::function<double(size_t i, const std::vector<double>& want)> bound;
};

// Max NMSE per tested activation dtype.
double tolerance(DType act);

// All cases (cases_*.cpp).
const std::vector<OpCase>& all_cases();

struct CaseResult {
  bool ok = true;
  std::string summary;  // one line per checked output
  std::string detail;   // first elements, OK / NOT OK, on failure
};

// Runs `c` on `target` with activations of dtype `act` and on `ref` (the CPU
// backend, float64), with inputs drawn from `seed`.
CaseResult run_case(const OpCase& c, backend::Backend& target, DType act, backend::Backend& ref,
                    uint64_t seed);

// Fused ops that promise the unfused bits (bitwise.cpp): adamw_update with
// a compute_out of dtype `compute` against adamw_update then cast(), three
// steps on `be`, over n elements that start `offset` elements into their
// buffers (an offset not a multiple of 4 defeats the 16-byte packs). ""
// when param, m, v and the copy (and the untouched elements around them)
// match bit for bit, else a description of the first differences.
std::string adamw_compute_out_mismatch(backend::Backend& be, DType compute, int64_t n, int64_t offset,
                                       uint64_t seed);
// fp8_swiglu_cast_transpose and its backward against swiglu_forward /
// swiglu_backward then fp8_cast_transpose on `be` (activations of dtype
// `act`, codes of dtype `fp8`, fc1 (R, 2F)): "" when the codes, their
// transposes and the amaxes match bit for bit, else the first differences.
// blockwise: fp8_swiglu_block_cast and its backward against fp8_block_cast
// (codes, transposes and both scale_inv arrays).
std::string fp8_swiglu_cast_mismatch(backend::Backend& be, DType act, DType fp8, int64_t R, int64_t F,
                                     uint64_t seed, bool blockwise = false);

}  // namespace tripod::testing
