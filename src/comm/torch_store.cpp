// Implementation of comm/torch_store.h: a blocking client of PyTorch's
// TCPStore wire protocol, both generations, written from the protocol's
// description in the header.
#include "comm/torch_store.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/env.h"
#include "base/error.h"
#include "base/log.h"
#include "comm/tcp_store.h"

namespace tripod::comm {

namespace {

using Clock = std::chrono::steady_clock;

// Operations, indexed into the per-generation command tables below.
enum Op { kSet, kGet, kAdd, kCheck, kWait, kValidate };
constexpr uint8_t kLegacy[] = {0, 2, 3, 4, 5, 0xff};
constexpr uint8_t kValidated[] = {1, 3, 4, 5, 6, 0};
constexpr uint32_t kValidationMagic = 0x3C85F7CE;
// PyTorch's libuv server refuses strings longer than this.
constexpr size_t kMaxKey = 8 * 1024;

void put_u64(Bytes& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
void put_u32(Bytes& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
void put_str(Bytes& out, const std::string& s) {
  put_u64(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}
uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(p[i])) << (8 * i);
  return v;
}

bool send_bytes(int fd, const Bytes& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

// Reads exactly n bytes before the deadline: 1 done, 0 timed out, -1 closed.
int recv_bytes(int fd, char* out, size_t n, Clock::time_point deadline) {
  size_t got = 0;
  while (got < n) {
    auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
    if (left <= 0) return 0;
    pollfd p{fd, POLLIN, 0};
    int pr = ::poll(&p, 1, int(std::min<long>(left, 1000)));
    if (pr < 0 && errno != EINTR) return -1;
    if (pr <= 0) continue;
    ssize_t k = ::recv(fd, out + got, n - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    got += size_t(k);
  }
  return 1;
}

}  // namespace

TorchAgentStore::TorchAgentStore(std::string host, int port, std::string prefix, int rank,
                                 Millis timeout)
    : Store(timeout), host_(std::move(host)), port_(port), prefix_(std::move(prefix)), rank_(rank) {
  std::lock_guard<std::mutex> lock(mu_);
  connect_locked(timeout);
}

TorchAgentStore::~TorchAgentStore() {
  std::lock_guard<std::mutex> lock(mu_);
  close_locked();
}

std::string TorchAgentStore::endpoint() const { return host_ + ":" + std::to_string(port_); }

void TorchAgentStore::close_locked() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

uint8_t TorchAgentStore::command(int op) const {
  return protocol_ == Protocol::Legacy ? kLegacy[op] : kValidated[op];
}

Bytes TorchAgentStore::keys_request(int op, const std::vector<std::string>& keys) const {
  Bytes req{char(command(op))};
  put_u64(req, keys.size());
  for (const auto& k : keys) put_str(req, prefix_ + k);
  return req;
}

// Opens a connection and checks that the server answers protocol `p`: a
// `check` of a key nobody sets must come back as one byte, 0 or 1.
bool TorchAgentStore::try_protocol_locked(Protocol p, Millis answer_within, Millis connect_timeout) {
  std::string last_error;
  int attempts = 0;
  const auto t0 = Clock::now();
  fd_ = tcp_connect(host_, port_, connect_timeout, last_error, attempts);
  if (fd_ < 0) {
    throw TimeoutError(
        fmt::format("rank {} could not reach torchrun's agent store at {} (MASTER_ADDR:MASTER_PORT) "
                    "after {:.1f} s and {} attempts; last error: {}",
                    rank_, endpoint(), std::chrono::duration<double>(Clock::now() - t0).count(),
                    attempts, last_error),
        "the agent of node 0 hosts it; is it running, and is MASTER_PORT open between the nodes?");
  }
  protocol_ = p;
  Bytes req;
  if (p == Protocol::Validated) {
    req.push_back(char(kValidated[kValidate]));
    put_u32(req, kValidationMagic);
  }
  Bytes probe = keys_request(kCheck, {"probe/never-set"});
  req.insert(req.end(), probe.begin(), probe.end());
  char answer = 0;
  if (send_bytes(fd_, req) && recv_bytes(fd_, &answer, 1, Clock::now() + answer_within) == 1 &&
      (answer == 0 || answer == 1)) {
    // A legacy answer is one byte; make sure nothing else follows (a server
    // of another generation would have read the probe as something else).
    pollfd pf{fd_, POLLIN, 0};
    if (::poll(&pf, 1, 0) == 0) return true;
  }
  close_locked();
  return false;
}

void TorchAgentStore::connect_locked(Millis timeout) {
  const std::string forced = env::get_or("TRIPOD_TORCH_STORE_PROTOCOL", "");
  TRIPOD_CHECK_HINT(forced.empty() || forced == "legacy" || forced == "validated",
                    "use legacy (PyTorch 1.x and 2.0) or validated (later releases), or unset it",
                    "TRIPOD_TORCH_STORE_PROTOCOL='{}' is not understood", forced);
  // torchrun sets TORCH_NCCL_ASYNC_ERROR_HANDLING from 2.2 on: then the
  // legacy probe is expected to go unanswered, so do not wait long for it.
  const bool likely_validated = env::get("TORCH_NCCL_ASYNC_ERROR_HANDLING").has_value();
  const Millis legacy_wait = likely_validated ? Millis{300} : Millis{3000};
  const Millis answer_wait = std::max(Millis{10000}, std::min(timeout, Millis{60000}));
  bool ok = false;
  if (forced == "legacy") ok = try_protocol_locked(Protocol::Legacy, answer_wait, timeout);
  else if (forced == "validated") ok = try_protocol_locked(Protocol::Validated, answer_wait, timeout);
  else {
    ok = try_protocol_locked(Protocol::Legacy, legacy_wait, timeout) ||
         try_protocol_locked(Protocol::Validated, answer_wait, timeout);
  }
  if (!ok) {
    throw Error(fmt::format("rank {}: torchrun's agent store at {} does not answer PyTorch's TCPStore "
                            "protocol ({})",
                            rank_, endpoint(),
                            forced.empty() ? "neither the legacy nor the validated form" : forced),
                "another program may hold MASTER_PORT, or this PyTorch release speaks a form tripod "
                "does not know (see docs/distributed.md, torchrun's agent store); "
                "`torchrun --rdzv_backend c10d` with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, or "
                "`tripod launch`, avoid the agent store");
  }
  local_addr_ = socket_local_address(fd_);
}

void TorchAgentStore::send_locked(const Bytes& req, const char* what, const std::string& key) {
  if (fd_ < 0) connect_locked(timeout_);
  if (!send_bytes(fd_, req)) {
    close_locked();
    throw Error(fmt::format("rank {}: lost the connection to torchrun's agent store at {} during {} "
                            "of '{}'",
                            rank_, endpoint(), what, key),
                "the torchrun agent of node 0 exited; look at its output");
  }
}

void TorchAgentStore::recv_locked(char* out, size_t n, Millis timeout, const char* what,
                                  const std::string& key) {
  const int r = recv_bytes(fd_, out, n, Clock::now() + timeout);
  if (r == 1) return;
  // Out of step with the server either way: start over on the next request.
  close_locked();
  if (r == 0)
    throw TimeoutError(fmt::format("rank {}: store {} at {} (torchrun's agent store) timed out after "
                                   "{:.1f} s for key(s) {}",
                                   rank_, what, endpoint(), timeout.count() / 1e3, key));
  throw Error(fmt::format("rank {}: lost the connection to torchrun's agent store at {} during {} of "
                          "'{}'",
                          rank_, endpoint(), what, key),
              "the torchrun agent of node 0 exited; look at its output");
}

void TorchAgentStore::set(const std::string& key, const Bytes& value) {
  TRIPOD_CHECK(prefix_.size() + key.size() <= kMaxKey, "store key too long: {}", key);
  std::lock_guard<std::mutex> lock(mu_);
  Bytes req{char(command(kSet))};
  put_str(req, prefix_ + key);
  put_u64(req, value.size());
  req.insert(req.end(), value.begin(), value.end());
  send_locked(req, "set", key);
}

Bytes TorchAgentStore::get(const std::string& key, Millis timeout) {
  wait({key}, timeout);
  std::lock_guard<std::mutex> lock(mu_);
  Bytes req{char(command(kGet))};
  put_str(req, prefix_ + key);
  send_locked(req, "get", key);
  char len[8];
  recv_locked(len, 8, timeout_, "get", key);
  const uint64_t n = get_u64(len);
  TRIPOD_CHECK(n <= (256u << 20), "torchrun's agent store sent a {}-byte value for '{}'", n, key);
  Bytes value(n);
  if (n) recv_locked(value.data(), n, timeout_, "get", key);
  return value;
}

int64_t TorchAgentStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  Bytes req{char(command(kAdd))};
  put_str(req, prefix_ + key);
  put_u64(req, uint64_t(delta));
  send_locked(req, "add", key);
  char v[8];
  recv_locked(v, 8, timeout_, "add", key);
  return int64_t(get_u64(v));
}

bool TorchAgentStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  send_locked(keys_request(kCheck, keys), "check", join_keys(keys));
  char r = 0;
  recv_locked(&r, 1, timeout_, "check", join_keys(keys));
  TRIPOD_CHECK(r == 0 || r == 1, "torchrun's agent store answered check with {}", int(r));
  return r == 0;
}

void TorchAgentStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  send_locked(keys_request(kWait, keys), "wait", join_keys(keys));
  char r = 0;
  recv_locked(&r, 1, effective(timeout), "wait", join_keys(keys));
  TRIPOD_CHECK(r == 0, "torchrun's agent store answered wait with {}", int(r));
}

}  // namespace tripod::comm
