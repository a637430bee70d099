// TcpStore: the bootstrap store over TCP. Rank 0 runs a TcpStoreServer at
// MASTER_ADDR:MASTER_PORT; every rank (rank 0 included) talks to it through
// a TcpStore client.
//
// Relates to: comm/store.h (contract), comm/context.h (who starts what),
// docs/distributed.md (wire format, job token, troubleshooting).
//
// Wire format (both directions): a frame is u32 n, then n parts of
// (u32 length, bytes), little-endian. The first frame of a connection must
// be {"HELLO", token, rank}; anything else, or a wrong token, is refused,
// logged on rank 0 with the peer's address, and closed.
//
// Connecting retries with exponential backoff until the timeout, then throws
// TimeoutError naming the address, the port, this rank and what to check.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/store.h"

namespace tripod::comm {

// Connects to host:port, retrying with exponential backoff (50 ms doubling to
// 1 s) until `timeout`. Returns a blocking socket with TCP_NODELAY, or -1
// with the last error and the number of attempts.
int tcp_connect(const std::string& host, int port, Millis timeout, std::string& last_error,
                int& attempts);
// The numeric local address of a connected socket.
std::string socket_local_address(int fd);

class TcpStoreServer {
 public:
  // Binds 0.0.0.0:port (0 = any free port; see port()). Throws Error when the
  // port is taken, naming it.
  TcpStoreServer(int port, std::string token);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  int port() const { return port_; }
  int refused_connections() const { return refused_.load(); }

 private:
  struct State;
  void run();
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = 0;
  std::string token_;
  std::atomic<int> refused_{0};
  std::thread thread_;
};

class TcpStore : public Store {
 public:
  // Connects (with retries up to `timeout`) and presents the job token.
  TcpStore(std::string host, int port, std::string token, int rank, Millis timeout);
  ~TcpStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout = Millis{0}) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout = Millis{0}) override;

  // The local address of the connection to the store: an address of this
  // host that the store's host can reach (used for Gloo's sockets).
  std::string local_address() const { return local_addr_; }
  std::string endpoint() const;  // "host:port"

 private:
  std::vector<Bytes> request(const std::vector<Bytes>& parts, Millis timeout, const char* what,
                             const std::vector<std::string>& keys);
  void connect_locked(Millis timeout);
  void close_locked();
  std::mutex mu_;
  std::string host_;
  int port_;
  std::string token_;
  int rank_;
  int fd_ = -1;
  std::string local_addr_;
};

}  // namespace tripod::comm
