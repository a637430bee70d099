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

void ErrorList::throw_if_any(const std::string& what) const {
  if (errors_.empty()) return;
  if (errors_.size() == 1) throw errors_.front();
  std::string m = fmt::format("{} problems {}:", errors_.size(), what);
  for (size_t i = 0; i < errors_.size(); ++i) {
    // Continuation lines of a message (a list of its own) keep their indent under the number.
    std::string body = errors_[i].message();
    for (size_t p = body.find('\n'); p != std::string::npos; p = body.find('\n', p + 1)) body.insert(p + 1, "   ");
    m += fmt::format("\n  {}. {}", i + 1, body);
    if (!errors_[i].hint().empty()) m += "\n     hint: " + errors_[i].hint();
  }
  throw Error(m);
}

namespace detail {

static const char* short_path(const char* file) {
  const char* s = std::strstr(file, "src/");
  return s ? s : file;
}

Error make_error(const char* cond, const char* file, int line, std::string message, std::string hint) {
  std::string where = fmt::format("{}:{}", short_path(file), line);
  if (cond) where += fmt::format(" (check `{}`)", cond);
  return Error(std::move(message), std::move(hint), std::move(where));
}

void check_failed(const char* cond, const char* file, int line, std::string message,
                  std::string hint) {
  throw make_error(cond, file, line, std::move(message), std::move(hint));
}

void fatal(const char* file, int line, const std::string& message) {
  std::fprintf(stderr, "tripod fatal: %s\n  at %s:%d\n", message.c_str(), short_path(file), line);
  std::fflush(stderr);
  std::abort();
}

}  // namespace detail
}  // namespace tripod
