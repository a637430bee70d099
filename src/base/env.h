// Environment variables, read in one place with clear errors for bad values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tripod::env {

std::optional<std::string> get(const char* name);           // unset or empty -> nullopt
std::string get_or(const char* name, const std::string& fallback);
std::optional<int64_t> get_int(const char* name);            // throws Error on non-integers
int64_t get_int_or(const char* name, int64_t fallback);

}  // namespace tripod::env
