// SharedMemory: a POSIX shared-memory segment mapped into this process, for
// ranks on one host (comm/ipc/). The creator names it; the others open it by
// that name; once every member has it mapped the creator unlinks the name,
// so a crash later leaves nothing behind in /dev/shm.
//
// Also the two futex calls the ranks wait with: a waiter sleeps on a 32-bit
// word of a shared mapping until the poster bumps it (no spinning: ranks that
// share a host share its cores).
//
// Relates to: comm/ipc/ipc_communicator.cpp (its control block),
// comm/ipc/cpu_ipc_device.cpp (CPU "device" buffers).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tripod::comm {

class SharedMemory {
 public:
  SharedMemory() = default;
  // A new zero-filled segment of `bytes` under a fresh name ("/tripod-ipc-...").
  static SharedMemory create(size_t bytes);
  // The segment another process created (its name and size).
  static SharedMemory open(const std::string& name, size_t bytes);
  ~SharedMemory();
  SharedMemory(SharedMemory&& o) noexcept;
  SharedMemory& operator=(SharedMemory&& o) noexcept;
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // Removes the name (the mappings stay valid); idempotent.
  void unlink() noexcept;

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  bool owner_ = false;
};

// Sleeps while *word == expected, at most `timeout` (spurious wake-ups are
// fine: callers re-check their condition).
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::microseconds timeout);
// Wakes every waiter on *word.
void futex_wake_all(std::atomic<uint32_t>* word);

}  // namespace tripod::comm
