// Implementation of ckpt/save_lock.h (POSIX: flock, /proc for a process's
// start time). See NOTE [Save-folder lock].
#include "ckpt/save_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "base/temp_files.h"
#include "ckpt/atomic_io.h"

namespace tripod::ckpt {
namespace {

using json = nlohmann::json;

std::string this_host() {
  char buf[256] = "?";
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string utc(int64_t t) {
  const std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  ::gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

// The process's start time in clock ticks since boot (/proc/PID/stat field
// 22), or -1 when unknown: with the pid it names one process, never a later
// one that reused the pid.
int64_t process_start_ticks(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = s.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return -1;
  std::istringstream f(s.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && f >> field; ++i)
    if (i == 22) return std::atoll(field.c_str());
  return -1;
}

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    at += n;
  }
  return out;
}

std::string describe(const json& r) {
  return fmt::format("host {}, pid {}, started {}, job {}", r.value("host", "?"), r.value("pid", int64_t{-1}),
                     utc(r.value("started", int64_t{0})), r.value("job", std::string("?")));
}

// The record of the lock's holder, or null when the file names none.
json holder_of(int fd) {
  const std::string text = read_all(fd);
  json r = json::parse(text, nullptr, false);
  return r.is_object() && r.contains("host") && r.contains("pid") ? r : json();
}

}  // namespace

struct SaveDirLock::Impl {
  std::string dir, path;
  int fd = -1;
  json record;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread heartbeat;

  void write_record() {
    const std::string text = record.dump() + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != ssize_t(text.size()))
      fail_path("--save", path, "writing the lock record", errno);
    ::fsync(fd);
  }

  // Renews the heartbeat every kHeartbeatSeconds until released. A failed
  // renewal is logged once: the run goes on (its saves report their own errors).
  void beat() {
    bool warned = false;
    std::unique_lock<std::mutex> lock(mu);
    while (!cv.wait_for(lock, std::chrono::seconds(kHeartbeatSeconds), [&] { return stop; })) {
      record["heartbeat"] = unix_now();
      const std::string text = record.dump() + "\n";
      if (::pwrite(fd, text.data(), text.size(), 0) != ssize_t(text.size()) && !warned) {
        warned = true;
        log::warn("could not renew the lock of {}: {}", path, std::strerror(errno));
      }
    }
  }

  // Throws when the recorded holder `r` is a live job (see NOTE [Save-folder lock]).
  void check_holder(const json& r, const std::string& flag, bool flock_ok) {
    const std::string host = r.value("host", ""), me = this_host();
    const int64_t pid = r.value("pid", int64_t{-1});
    const auto refuse = [&](const std::string& how) {
      throw Error(fmt::format("{} {} is in use by another job ({}; {}): two jobs saving into one folder replace "
                              "each other's checkpoints", flag, dir, describe(r), how),
                  fmt::format("wait for that job to end or stop it, or pass another {} folder", flag));
    };
    if (host == me) {
      if (pid == ::getpid()) return;
      const int64_t ticks = r.value("pid_start", int64_t{-1});
      if (pid_alive(pid) && (ticks < 0 || process_start_ticks(pid) == ticks))
        refuse(flock_ok ? "it holds the lock" : "its process is running");
      log::info("{} {}: took over the save-folder lock from a job that is no longer running ({})", flag, dir,
                describe(r));
      return;
    }
    const int64_t beat = r.value("heartbeat", int64_t{0});
    if (unix_now() - beat <= kStaleSeconds) {
      // Another host's holder with a recent heartbeat: alive when it moves.
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2 * kHeartbeatSeconds + 2);
      log::info("{} {}: the lock names a job on host {} (heartbeat {} s ago); watching its heartbeat for up to {} s",
                flag, dir, host, unix_now() - beat, 2 * kHeartbeatSeconds + 2);
      while (std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        const json now = holder_of(fd);
        if (now.is_null()) return;  // released meanwhile
        if (now.value("heartbeat", int64_t{0}) != beat) refuse("its heartbeat is being renewed");
      }
    }
    log::info("{} {}: took over the save-folder lock from a job on host {} whose heartbeat stopped {} s ago ({})",
              flag, dir, host, unix_now() - beat, describe(r));
  }
};

SaveDirLock::SaveDirLock(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

const std::string& SaveDirLock::path() const { return impl_->path; }

std::unique_ptr<SaveDirLock> SaveDirLock::acquire(const std::string& save_dir, const std::string& job,
                                                  const std::string& flag) {
  namespace fs = std::filesystem;
  check_writable_dir(flag, save_dir);
  auto impl = std::make_unique<Impl>();
  impl->dir = save_dir;
  impl->path = (fs::path(save_dir) / kSaveLockFile).string();
  impl->fd = ::open(impl->path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (impl->fd < 0) fail_path(flag, impl->path, "opening the save-folder lock", errno);
  std::unique_ptr<SaveDirLock> lock(new SaveDirLock(std::move(impl)));  // closes the file on a throw
  Impl& m = *lock->impl_;
  bool flock_ok = true;
  if (::flock(m.fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    if (e == EWOULDBLOCK) {
      const json r = holder_of(m.fd);
      throw Error(fmt::format("{} {} is in use by another job ({}): two jobs saving into one folder replace each "
                              "other's checkpoints", flag, save_dir,
                              r.is_null() ? std::string("its holder has not written its record yet") : describe(r)),
                  fmt::format("wait for that job to end or stop it, or pass another {} folder", flag));
    }
    flock_ok = false;
    log::info("{} {}: the file system does not support flock ({}); the lock relies on its recorded holder and "
              "heartbeat (NOTE in docs/checkpoints.md)", flag, save_dir, std::strerror(e));
  }
  if (const json r = holder_of(m.fd); !r.is_null()) m.check_holder(r, flag, flock_ok);
  const int64_t now = unix_now();
  m.record = {{"host", this_host()}, {"pid", int64_t{::getpid()}}, {"pid_start", process_start_ticks(::getpid())},
              {"started", now}, {"job", job}, {"heartbeat", now}};
  m.write_record();
  m.heartbeat = std::thread([&m] { m.beat(); });
  return lock;
}

SaveDirLock::~SaveDirLock() {
  if (!impl_) return;
  if (impl_->heartbeat.joinable()) {
    {
      std::lock_guard<std::mutex> g(impl_->mu);
      impl_->stop = true;
    }
    impl_->cv.notify_all();
    impl_->heartbeat.join();
    // Only the holder empties the record: a refused job leaves it alone.
    if (::ftruncate(impl_->fd, 0) != 0) log::warn("could not clear the lock {}: {}", impl_->path, std::strerror(errno));
  }
  if (impl_->fd >= 0) {
    ::flock(impl_->fd, LOCK_UN);
    ::close(impl_->fd);
  }
}

}  // namespace tripod::ckpt
