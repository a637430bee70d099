// Implementation of ckpt/atomic_io.h (POSIX).
#include "ckpt/atomic_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/debug_config.h"
#include "base/error.h"

namespace tripod::ckpt {
namespace {
std::atomic<int64_t> g_points{0};

std::string parent_of(const std::string& path) {
  auto p = std::filesystem::path(path).parent_path();
  return p.empty() ? "." : p.string();
}
}  // namespace

void reset_fault_points() { g_points.store(0); }
int64_t fault_points_passed() { return g_points.load(); }

void fault_point(const std::string& what) {
  const int64_t n = ++g_points;
  if (const int64_t at = debug_config().ckpt_fail_at; at > 0 && at == n)
    TRIPOD_FAIL("injected checkpoint failure at file operation {} ({}) by TRIPOD_CKPT_FAIL_AT", n, what);
}

void write_file_synced(const std::string& path, const void* bytes, size_t n) {
  fault_point("write " + path);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TRIPOD_CHECK(fd >= 0, "cannot create {}: {}", path, std::strerror(errno));
  const char* p = static_cast<const char*>(bytes);
  size_t left = n;
  while (left > 0) {
    const ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = errno;
      ::close(fd);
      TRIPOD_FAIL("cannot write {} ({} of {} bytes written): {}", path, n - left, n, std::strerror(e));
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
  const bool synced = ::fsync(fd) == 0;
  const int e = errno;
  ::close(fd);
  TRIPOD_CHECK(synced, "fsync of {} failed: {}", path, std::strerror(e));
}

void write_text_synced(const std::string& path, const std::string& text) {
  write_file_synced(path, text.data(), text.size());
}

void fsync_dir(const std::string& dir) {
  fault_point("fsync " + dir);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TRIPOD_CHECK(fd >= 0, "cannot open directory {}: {}", dir, std::strerror(errno));
  ::fsync(fd);  // some file systems refuse fsync on directories; the rename is still atomic
  ::close(fd);
}

void rename_path(const std::string& from, const std::string& to) {
  fault_point("rename " + from);
  TRIPOD_CHECK(std::rename(from.c_str(), to.c_str()) == 0, "cannot rename {} to {}: {}", from, to,
               std::strerror(errno));
}

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  write_text_synced(tmp, text);
  rename_path(tmp, path);
  fsync_dir(parent_of(path));
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TRIPOD_CHECK(in.good(), "cannot read {}", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace tripod::ckpt
