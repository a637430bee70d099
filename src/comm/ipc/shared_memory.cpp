// Implementation of comm/ipc/shared_memory.h (Linux: shm_open, mmap, futex).
#include "comm/ipc/shared_memory.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "base/error.h"

namespace tripod::comm {

namespace {

std::string fresh_name() {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  return fmt::format("/tripod-ipc-{}-{}-{:08x}", ::getpid(), counter.fetch_add(1), rd());
}

void* map(int fd, size_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  TRIPOD_CHECK_HINT(p != MAP_FAILED, "ranks that share a host exchange buffers through /dev/shm: check its size (df /dev/shm)",
                    "mapping shared memory {} ({} bytes) failed: {}", name, bytes, std::strerror(err));
  return p;
}

}  // namespace

SharedMemory SharedMemory::create(size_t bytes) {
  SharedMemory m;
  m.name_ = fresh_name();
  const int fd = ::shm_open(m.name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  TRIPOD_CHECK_HINT(fd >= 0, "check that /dev/shm is mounted and writable", "shm_open {} failed: {}", m.name_,
                    std::strerror(errno));
  m.owner_ = true;
  // posix_fallocate, not ftruncate: a full /dev/shm (64 MiB in a default
  // Docker container) is an error here, not a SIGBUS at the first write.
  if (const int err = ::posix_fallocate(fd, 0, off_t(bytes)); err != 0) {
    ::close(fd);
    ::shm_unlink(m.name_.c_str());
    TRIPOD_CHECK_HINT(false, "ranks that share a host exchange buffers through /dev/shm: check its size (df /dev/shm; "
                      "docker run --shm-size), or unset TRIPOD_IPC_COLLECTIVES",
                      "sizing shared memory {} to {} bytes failed: {}", m.name_, bytes, std::strerror(err));
  }
  m.data_ = map(fd, bytes, m.name_);
  m.size_ = bytes;
  return m;
}

SharedMemory SharedMemory::open(const std::string& name, size_t bytes) {
  SharedMemory m;
  m.name_ = name;
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  TRIPOD_CHECK_HINT(fd >= 0, "the ranks of one group must run on one host as one user",
                    "opening shared memory {} failed: {}", name, std::strerror(errno));
  m.data_ = map(fd, bytes, name);
  m.size_ = bytes;
  return m;
}

void SharedMemory::unlink() noexcept {
  if (owner_ && !name_.empty()) ::shm_unlink(name_.c_str());
  owner_ = false;
}

SharedMemory::~SharedMemory() {
  unlink();
  if (data_) ::munmap(data_, size_);
}

SharedMemory::SharedMemory(SharedMemory&& o) noexcept
    : data_(o.data_), size_(o.size_), name_(std::move(o.name_)), owner_(o.owner_) {
  o.data_ = nullptr;
  o.size_ = 0;
  o.owner_ = false;
}

SharedMemory& SharedMemory::operator=(SharedMemory&& o) noexcept {
  if (this != &o) {
    unlink();
    if (data_) ::munmap(data_, size_);
    data_ = o.data_;
    size_ = o.size_;
    name_ = std::move(o.name_);
    owner_ = o.owner_;
    o.data_ = nullptr;
    o.size_ = 0;
    o.owner_ = false;
  }
  return *this;
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::microseconds timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  timespec ts{};
  ts.tv_sec = timeout.count() / 1000000;
  ts.tv_nsec = (timeout.count() % 1000000) * 1000;
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace tripod::comm
