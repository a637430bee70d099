// Errors for all of tripod (see docs/errors.md).
//
// Two tiers, as in ggml/c10d:
//  - TRIPOD_CHECK(cond, "fmt", args...) throws tripod::Error for user input,
//    invariants and layout rules. The message names the values; a hint names
//    the fix. cli/main.cpp is the only place that turns an Error into an exit
//    code, so library code never calls exit(). It prints where the check is
//    (file:line and the condition) only for an error without a fix (an
//    invariant, i.e. an internal error), or for every error with
//    TRIPOD_ERROR_SOURCE=1.
//  - Library calls (CUDA, cuBLAS, NCCL) have their own check macros built on
//    detail::check_failed, in the module that owns the library.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <vector>

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

// Several user errors found in one pass (a command line's incompatibilities),
// so a user fixes them all at once instead of one per attempt.
//   ErrorList problems;
//   TRIPOD_CHECK_INTO(problems, mbs > 0, "pass --micro-batch-size N", "--micro-batch-size is {}", mbs);
//   problems.collect([&] { args.finalize(); });   // an Error it throws is recorded
//   problems.throw_if_any("with the command line");
class ErrorList {
 public:
  void add(Error e) { errors_.push_back(std::move(e)); }
  // Runs check(); a tripod::Error it throws (not a timeout or an
  // out-of-memory error) is recorded and the pass goes on. Returns whether
  // check() finished without one.
  template <typename F>
  bool collect(F&& check) {
    try {
      check();
      return true;
    } catch (const TimeoutError&) {
      throw;
    } catch (const OutOfMemoryError&) {
      throw;
    } catch (const Error& e) {
      add(e);
      return false;
    }
  }
  bool empty() const { return errors_.empty(); }
  size_t size() const { return errors_.size(); }
  const std::vector<Error>& errors() const { return errors_; }
  // None: returns. One: throws it as it is. Several: throws one Error,
  // "N problems <what>:", then each message with its fix, numbered.
  void throw_if_any(const std::string& what) const;

 private:
  std::vector<Error> errors_;
};

namespace detail {
[[noreturn]] void check_failed(const char* cond, const char* file, int line,
                               std::string message, std::string hint = {});
Error make_error(const char* cond, const char* file, int line, std::string message, std::string hint = {});
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

// TRIPOD_CHECK_INTO(list, cond, hint, "fmt", args...): as TRIPOD_CHECK_HINT,
// but the Error is added to the ErrorList `list` and the code goes on.
#define TRIPOD_CHECK_INTO(list, cond, hint, ...)                                      \
  do {                                                                                \
    if (!(cond)) (list).add(::tripod::detail::make_error(#cond, __FILE__, __LINE__,   \
                                                         ::fmt::format(__VA_ARGS__), (hint))); \
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
