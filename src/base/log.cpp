// Implementation of base/log.h. Lines are written whole under a mutex so
// threads (data prefetch, watchdog) never interleave.
#include "base/log.h"

#include <cstdio>
#include <mutex>

namespace tripod::log {
namespace {
std::mutex g_mutex;
Level g_level = Level::Info;
std::string g_prefix;
thread_local Level t_min_level = Level::Debug;  // ScopedMinLevel
}  // namespace

ScopedMinLevel::ScopedMinLevel(Level level) : saved_(t_min_level) { t_min_level = level; }
ScopedMinLevel::~ScopedMinLevel() { t_min_level = saved_; }

void set_level(Level level) { g_level = level; }
void set_prefix(std::string prefix) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_prefix = std::move(prefix);
}

void write(Level level, const std::string& line) {
  if (level < g_level || level < t_min_level) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  FILE* out = level >= Level::Warn ? stderr : stdout;
  const char* tag = level == Level::Warn ? "warning: " : level == Level::Error ? "error: " : "";
  std::fprintf(out, "%s%s%s\n", g_prefix.c_str(), tag, line.c_str());
  std::fflush(out);
}

}  // namespace tripod::log
