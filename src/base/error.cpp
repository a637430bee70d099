// Implementation of base/error.h.
#include "base/error.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tripod {

static std::string compose(const std::string& message, const std::string& hint) {
  if (hint.empty()) return message;
  return message + "\n  hint: " + hint;
}

Error::Error(std::string message, std::string hint, std::string where)
    : std::runtime_error(compose(message, hint)),
      message_(std::move(message)),
      hint_(std::move(hint)),
      where_(std::move(where)) {}

namespace detail {

static const char* short_path(const char* file) {
  const char* s = std::strstr(file, "src/");
  return s ? s : file;
}

void check_failed(const char* cond, const char* file, int line, std::string message,
                  std::string hint) {
  std::string where = fmt::format("{}:{}", short_path(file), line);
  if (cond) where += fmt::format(" (check `{}`)", cond);
  throw Error(std::move(message), std::move(hint), std::move(where));
}

void fatal(const char* file, int line, const std::string& message) {
  std::fprintf(stderr, "tripod fatal: %s\n  at %s:%d\n", message.c_str(), short_path(file), line);
  std::fflush(stderr);
  std::abort();
}

}  // namespace detail
}  // namespace tripod
