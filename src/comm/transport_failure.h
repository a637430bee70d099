// Transport failures outside the caller's thread. Gloo's TCP transport
// reads messages on its own event-loop thread; a peer that sends more bytes
// than this rank posted for a collective (ranks that disagree on a tensor
// size) makes Gloo throw there (`op.preamble.length <= op.nbytes`), where
// nothing can catch it, and the C++ runtime would print `terminate called`
// and abort (exit 134). The handler installed here turns any exception that
// escapes a thread into one tripod error naming the collectives this
// process had in flight (op, sequence number, group, bytes) and the sizes
// the transport saw, and exits with code 2 as a tripod::Error does.
//
//   install_transport_failure_handler();          // once, by every communicator
//   InFlight f(describe(op, seq, bytes));         // while a collective runs
//
// Relates to: comm/gloo/gloo_communicator.cpp, comm/nccl/nccl_communicator.cpp.
#pragma once

#include <cstdint>
#include <string>

namespace tripod::comm {

// Installs the std::terminate handler (idempotent, thread-safe).
void install_transport_failure_handler();

// Registers `what` as in flight until destroyed (or finish()).
class InFlight {
 public:
  InFlight() = default;
  explicit InFlight(std::string what);
  ~InFlight() { finish(); }
  InFlight(InFlight&& o) noexcept : id_(o.id_) { o.id_ = 0; }
  InFlight& operator=(InFlight&&) = delete;
  InFlight(const InFlight&) = delete;
  void finish();

 private:
  uint64_t id_ = 0;
};

// A transport's message in words: Gloo's size check
// ("op.preamble.length <= op.nbytes. 4096 vs 2048") becomes "a peer sent
// 4096 bytes where this rank posted 2048 ...". Other messages unchanged.
std::string explain_transport_error(const std::string& what);

// The message the handler prints for an escaping exception (for tests).
std::string transport_failure_message(const std::string& exception_what);

}  // namespace tripod::comm
