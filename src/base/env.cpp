// Implementation of base/env.h.
#include "base/env.h"

#include <cstdlib>

#include "base/error.h"

namespace tripod::env {

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

std::string get_or(const char* name, const std::string& fallback) {
  auto v = get(name);
  return v ? *v : fallback;
}

std::optional<int64_t> get_int(const char* name) {
  auto v = get(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  long long x = std::strtoll(v->c_str(), &end, 10);
  TRIPOD_CHECK_HINT(end && *end == '\0', fmt::format("set {} to a whole number or unset it", name),
                    "environment variable {}='{}' is not an integer", name, *v);
  return static_cast<int64_t>(x);
}

int64_t get_int_or(const char* name, int64_t fallback) {
  auto v = get_int(name);
  return v ? *v : fallback;
}

}  // namespace tripod::env
