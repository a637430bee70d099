// Errors for all of tripod (see docs/errors.md).
//
// Two tiers, as in ggml/c10d:
//  - TRIPOD_CHECK(cond, "fmt", args...) throws tripod::Error for user input,
//    invariants and layout rules. The message names the values; a hint names
//    the fix. cli/main.cpp is the only place that turns an Error into an exit
//    code, so library code never calls exit().
//  - Library calls (CUDA, cuBLAS, NCCL) have their own check macros built on
//    detail::check_failed, in the module that owns the library.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tripod {

class Error : public std::runtime_error {
 public:
  Error(std::string message, std::string hint = {}, std::string where = {});
  const std::string& message() const { return message_; }
  const std::string& hint() const { return hint_; }
  const std::string& where() const { return where_; }  // file:line of the check

 private:
  std::string message_, hint_, where_;
};

// A blocking wait (store, collective, p2p) ran past its deadline.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// An allocation did not fit the device (or the simulated device memory of
// TRIPOD_CPU_MEMORY_LIMIT_MB on CPU). Carries the numbers so that the trainer
// can name the rank and ask the layout planner for layouts that fit.
class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(std::string message, std::string hint, size_t requested_bytes, size_t in_use_bytes,
                   size_t capacity_bytes)
      : Error(std::move(message), std::move(hint)),
        requested(requested_bytes), in_use(in_use_bytes), capacity(capacity_bytes) {}
  size_t requested, in_use;
  size_t capacity;  // the device's memory, 0 when unknown
};

namespace detail {
[[noreturn]] void check_failed(const char* cond, const char* file, int line,
                               std::string message, std::string hint = {});
}  // namespace detail

}  // namespace tripod

// TRIPOD_CHECK(cond, "fmt", args...): throw tripod::Error naming the values.
#define TRIPOD_CHECK(cond, ...)                                                       \
  do {                                                                                \
    if (!(cond)) ::tripod::detail::check_failed(#cond, __FILE__, __LINE__,            \
                                                ::fmt::format(__VA_ARGS__));          \
  } while (0)

// TRIPOD_CHECK_HINT(cond, hint, "fmt", args...): as TRIPOD_CHECK, with the fix.
#define TRIPOD_CHECK_HINT(cond, hint, ...)                                            \
  do {                                                                                \
    if (!(cond)) ::tripod::detail::check_failed(#cond, __FILE__, __LINE__,            \
                                                ::fmt::format(__VA_ARGS__), (hint));  \
  } while (0)

// TRIPOD_FAIL("fmt", args...): unconditional error.
#define TRIPOD_FAIL(...) \
  ::tripod::detail::check_failed(nullptr, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__))

// TRIPOD_FATAL("fmt", args...): for places that must not throw (destructors,
// watchdog threads): print and abort.
#define TRIPOD_FATAL(...) ::tripod::detail::fatal(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))

namespace tripod::detail {
[[noreturn]] void fatal(const char* file, int line, const std::string& message);
}
