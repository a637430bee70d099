// Implementation of base/temp_files.h (POSIX). See NOTE [Temporaries].
#include "base/temp_files.h"

#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <regex>

#include "base/log.h"

namespace tripod {
namespace {

constexpr int kSlots = 64;
constexpr size_t kPathMax = 4096;

// A slot is claimed (state 1) while its path is written, then published
// (state 2); the handler only reads published slots.
struct Slot {
  std::atomic<int> state{0};
  char path[kPathMax];
};
std::array<Slot, kSlots> g_slots;

void on_signal(int sig) {
  for (auto& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == 2) ::unlink(s.path);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

std::string temporary_name(const std::string& path) {
  std::random_device rd;
  char tag[64];
  std::snprintf(tag, sizeof tag, ".tmp-%d-%08x", static_cast<int>(::getpid()), static_cast<unsigned>(rd()));
  return path + tag;
}

int register_temporary(const std::string& path) {
  if (path.size() >= kPathMax) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expect = 0;
    if (!g_slots[i].state.compare_exchange_strong(expect, 1)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(2, std::memory_order_release);
    return i;
  }
  return -1;
}

void unregister_temporary(int slot) {
  if (slot >= 0 && slot < kSlots) g_slots[slot].state.store(0, std::memory_order_release);
}

void remove_temporaries_on_signal() {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

bool pid_alive(int64_t pid) {
  if (pid <= 0 || pid > INT32_MAX) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

int remove_stale_temporaries(const std::string& dir, int64_t min_age_s) {
  namespace fs = std::filesystem;
  static const std::regex pattern(R"(^.+\.tmp-([0-9]{1,10})-[0-9a-f]{8}$)");
  std::error_code ec;
  int removed = 0;
  for (const auto& e : fs::directory_iterator(dir.empty() ? "." : dir, ec)) {
    const std::string name = e.path().filename().string();
    std::smatch m;
    if (!std::regex_match(name, m, pattern) || !e.is_regular_file(ec)) continue;
    const int64_t pid = std::stoll(m[1].str());
    if (pid_alive(pid)) continue;
    if (min_age_s > 0) {
      const auto written = e.last_write_time(ec);
      if (ec || fs::file_time_type::clock::now() - written < std::chrono::seconds(min_age_s)) continue;
    }
    const auto bytes = e.file_size(ec);
    if (fs::remove(e.path(), ec)) {
      log::info("removed {} ({} bytes), a temporary file left by process {} that ended before finishing it",
                e.path().string(), ec ? 0 : bytes, pid);
      ++removed;
    }
  }
  return removed;
}

}  // namespace tripod
