// Logging: one line per message, to stdout (info) or stderr (warn/error).
// Multi-rank runs print only from the ranks that set_log_rank() allows
// (by default: all; the trainer logs from the last pipeline stage's first
// tp/dp rank, as Megatron does).
#pragma once

#include <fmt/format.h>

#include <string>

namespace tripod::log {

enum class Level { Debug, Info, Warn, Error };

void set_level(Level level);
void set_prefix(std::string prefix);  // e.g. "[rank 3] "; empty by default
void write(Level level, const std::string& line);

// For the scope of one object, on this thread only: lines below `level`
// are dropped (e.g. Level::Warn on ranks other than 0 while the data is
// opened, so the start-up lines print once per job, as Megatron's).
class ScopedMinLevel {
 public:
  explicit ScopedMinLevel(Level level);
  ~ScopedMinLevel();
  ScopedMinLevel(const ScopedMinLevel&) = delete;
  ScopedMinLevel& operator=(const ScopedMinLevel&) = delete;

 private:
  Level saved_;
};

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::Info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::Warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::Error, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::Debug, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace tripod::log
