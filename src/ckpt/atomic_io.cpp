// Implementation of ckpt/atomic_io.h (POSIX).
#include "ckpt/atomic_io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
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

[[noreturn]] void killed(int64_t n, const char* what) {
  std::fprintf(stderr, "TRIPOD_CKPT_KILL_AT: SIGKILL at checkpoint file operation %lld (%s)\n",
               static_cast<long long>(n), what);
  std::fflush(stderr);
  ::raise(SIGKILL);
  std::abort();  // not reached
}

// Counts one operation; true when it is the one TRIPOD_CKPT_FAIL_AT names.
// TRIPOD_CKPT_KILL_AT kills the process at its operation (a write: after
// half of the bytes, see write_file_synced); TRIPOD_CKPT_TRACE prints it.
bool fault_here(int64_t* n, const std::string& what, bool is_write = false) {
  *n = ++g_points;
  if (debug_config().ckpt_trace) {
    std::fprintf(stderr, "TRIPOD_CKPT_TRACE: %lld %s\n", static_cast<long long>(*n), what.c_str());
    std::fflush(stderr);
  }
  if (!is_write && debug_config().ckpt_kill_at == *n) killed(*n, what.c_str());
  const int64_t at = debug_config().ckpt_fail_at;
  return at > 0 && at == *n;
}

[[noreturn]] void injected(int64_t n, const std::string& what) {
  TRIPOD_FAIL("injected checkpoint failure at file operation {} ({}) by TRIPOD_CKPT_FAIL_AT", n, what);
}

int64_t free_bytes(const std::string& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

// A write that failed: a full disk (or quota) names the folder and the bytes
// still needed, anything else the error.
[[noreturn]] void write_failed(const std::string& path, size_t written, size_t n, int e) {
  if (e == ENOSPC || e == EDQUOT) {
    const std::string dir = parent_of(path);
    const int64_t free = free_bytes(dir);
    TRIPOD_CHECK_HINT(false,
                      fmt::format("free at least {} bytes in {} (earlier checkpoints: --save-retain; "
                                  "unfinished saves: iter_*.tmp folders), or save to another folder",
                                  n - written, dir),
                      "no space left in {} ({}): {} needs {} bytes, {} were written, {} more are needed{}", dir,
                      std::strerror(e), path, n, written, n - written,
                      free >= 0 ? fmt::format(" ({} bytes free)", free) : std::string());
  }
  TRIPOD_FAIL("cannot write {} ({} of {} bytes written): {}", path, written, n, std::strerror(e));
}
}  // namespace

void reset_fault_points() { g_points.store(0); }
int64_t fault_points_passed() { return g_points.load(); }

void fault_point(const std::string& what) {
  int64_t n = 0;
  if (fault_here(&n, what)) injected(n, what);
}

void write_file_synced(const std::string& path, const void* bytes, size_t n) {
  SyncedFileWriter w(path, n);
  w.write_at(0, bytes, n);
  w.finish();
}

SyncedFileWriter::SyncedFileWriter(const std::string& path, size_t total) : path_(path), total_(total) {
  const bool fail = fault_here(&point_, "write " + path, true);
  kill_ = debug_config().ckpt_kill_at == point_;
  full_disk_ = fail && debug_config().ckpt_fail_enospc;  // see NOTE [Failure injection]
  if (fail && !full_disk_) injected(point_, "write " + path);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TRIPOD_CHECK(fd_ >= 0, "cannot create {}: {}", path, std::strerror(errno));
}

SyncedFileWriter::~SyncedFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void SyncedFileWriter::write_at(uint64_t offset, const void* bytes, size_t n) {
  TRIPOD_CHECK(offset + n <= total_, "{}: a write of {} bytes at {} is past the file's {} bytes", path_, n, offset,
               total_);
  const char* p = static_cast<const char*>(bytes);
  size_t left = n;
  while (left > 0) {
    // Kill or a full disk (injected) once half of the file's bytes got in.
    const size_t room = written_ >= total_ / 2 ? 0 : total_ / 2 - written_;
    if (kill_ && room == 0) killed(point_, path_.c_str());  // a torn file, as a node dying mid-write
    if (full_disk_ && room == 0) {
      ::close(fd_);
      fd_ = -1;
      write_failed(path_, written_, total_, ENOSPC);
    }
    const size_t want = kill_ || full_disk_ ? std::min(left, room) : left;
    const ssize_t w = ::pwrite(fd_, p, want, static_cast<off_t>(offset + (n - left)));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = w == 0 ? ENOSPC : errno;  // a write of 0 bytes: the device is full
      ::close(fd_);
      fd_ = -1;
      write_failed(path_, written_, total_, e);
    }
    p += w;
    left -= static_cast<size_t>(w);
    written_ += static_cast<size_t>(w);
  }
}

void SyncedFileWriter::overwrite_at(uint64_t offset, const void* bytes, size_t n) {
  TRIPOD_CHECK(offset + n <= written_, "{}: an overwrite of {} bytes at {} is past the {} bytes written", path_, n,
               offset, written_);
  const char* p = static_cast<const char*>(bytes);
  for (size_t done = 0; done < n;) {
    const ssize_t w = ::pwrite(fd_, p + done, n - done, static_cast<off_t>(offset + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = w == 0 ? ENOSPC : errno;
      ::close(fd_);
      fd_ = -1;
      write_failed(path_, written_, total_, e);
    }
    done += static_cast<size_t>(w);
  }
}

void SyncedFileWriter::finish() {
  if (kill_) killed(point_, path_.c_str());  // an empty (or half) file
  TRIPOD_CHECK(written_ == total_, "{}: {} of {} bytes were written", path_, written_, total_);
  const bool synced = ::fsync(fd_) == 0;
  const int e = errno;
  ::close(fd_);
  fd_ = -1;
  TRIPOD_CHECK(synced, "fsync of {} failed: {}", path_, std::strerror(e));
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

// ---- checks before a run writes ----

namespace {
// The nearest part of `path` that exists (what `ls -ld` should look at).
std::string existing_ancestor(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  while (!p.empty() && !std::filesystem::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  return p.empty() ? "." : p.string();
}
}  // namespace

void fail_path(const std::string& flag, const std::string& path, const std::string& op, int err) {
  const std::string what = flag.empty() ? path : flag + " " + path;
  std::string fix;
  switch (err) {
    case EACCES:
    case EPERM:
      fix = fmt::format("pass a folder this user can write, or fix the permissions (ls -ld {})",
                        existing_ancestor(path));
      break;
    case EROFS: fix = "the file system is mounted read-only: pass a path on a writable one"; break;
    case ENOSPC:
    case EDQUOT: fix = "free space on that file system (df -h), or pass a path on another one"; break;
    case ENOTDIR:
    case EEXIST: fix = fmt::format("a part of the path is a file, not a folder (ls -ld {})", existing_ancestor(path));
      break;
    case EISDIR: fix = "the path is a folder: pass a file name"; break;
    default: fix = fmt::format("check the path, its permissions and free space (ls -ld {}; df -h)",
                               existing_ancestor(path));
  }
  throw Error(fmt::format("cannot write {}: {} failed: {}", what, op, std::strerror(err)), fix);
}

void check_writable_dir(const std::string& flag, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) fail_path(flag, dir, "creating the folder", ec.value());
  }
  char host[64] = "host";
  ::gethostname(host, sizeof host - 1);
  const std::string probe = (fs::path(dir) / fmt::format(".tripod_probe.{}.{}", host, ::getpid())).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_path(flag, dir, "creating a file in it", errno);
  ::close(fd);
  ::unlink(probe.c_str());
}

void check_appendable_file(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    fs::create_directories(parent, ec);
    if (ec) fail_path(flag, path, "creating its folder " + parent.string(), ec.value());
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) fail_path(flag, path, "opening it for appending", errno);
  ::close(fd);
}

}  // namespace tripod::ckpt
