// TorchAgentStore: a client of the TCPStore that torchrun's agent hosts on
// MASTER_ADDR:MASTER_PORT (workers see TORCHELASTIC_USE_AGENT_STORE=True).
// There the port is taken by the agent, so rank 0 cannot host tripod's own
// store; every rank talks to the agent's store instead, as the workers of a
// PyTorch program do through torch.distributed.
//
// Relates to: comm/store.h (contract), comm/tcp_store.h (tripod's own store),
// comm/context.cpp (chooses this store under torchrun's agent store),
// docs/distributed.md ("torchrun's agent store": the protocol and versions).
//
// Wire protocol (PyTorch's TCPStore; little-endian, sizes are u64):
//   a request is a u8 command then its arguments; a string or a byte vector
//   is u64 length + bytes. set: key, value (no answer). get: key -> vector.
//   add: key, i64 -> i64. check: u64 n, n keys -> u8 (0 ready, 1 not).
//   wait: u64 n, n keys -> u8 0 once all exist.
// Two generations use different command numbers:
//   legacy    (PyTorch 1.x, 2.0): set 0, get 2, add 3, check 4, wait 5.
//   validated (later releases, libuv and classic servers): every connection
//     first sends {0, u32 0x3C85F7CE}; then set 1, get 3, add 4, check 5, wait 6.
// Sending the validation to a legacy server would be read as a set with a
// gigabyte key, so the client first probes with a legacy `check` (a validated
// server ignores or drops it), and only when no legacy answer comes, opens a
// fresh connection with the validated handshake. TRIPOD_TORCH_STORE_PROTOCOL
// (legacy | validated) skips the probe.
#pragma once

#include <mutex>
#include <string>

#include "comm/store.h"

namespace tripod::comm {

class TorchAgentStore : public Store {
 public:
  enum class Protocol { Legacy, Validated };

  // Connects to host:port (retrying up to `timeout`), detects the protocol,
  // and puts every key under `prefix` (one namespace per job and attempt).
  TorchAgentStore(std::string host, int port, std::string prefix, int rank, Millis timeout);
  ~TorchAgentStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout = Millis{0}) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout = Millis{0}) override;

  Protocol protocol() const { return protocol_; }
  static const char* protocol_name(Protocol p) { return p == Protocol::Legacy ? "legacy" : "validated"; }
  std::string local_address() const { return local_addr_; }
  std::string endpoint() const;  // "host:port"

 private:
  void connect_locked(Millis timeout);
  bool try_protocol_locked(Protocol p, Millis answer_within, Millis connect_timeout);
  void close_locked();
  uint8_t command(int op) const;
  void send_locked(const Bytes& req, const char* what, const std::string& key);
  void recv_locked(char* out, size_t n, Millis timeout, const char* what, const std::string& key);
  Bytes keys_request(int op, const std::vector<std::string>& keys) const;
  std::mutex mu_;
  std::string host_;
  int port_;
  std::string prefix_;
  int rank_;
  int fd_ = -1;
  Protocol protocol_ = Protocol::Legacy;
  std::string local_addr_;
};

}  // namespace tripod::comm
