// Implementation of comm/tcp_store.h: a poll()-loop server thread and a
// blocking client with deadlines.
#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "base/error.h"
#include "base/log.h"

namespace tripod::comm {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMaxParts = 4096;
constexpr uint32_t kMaxFrameBytes = 256u << 20;

Bytes str_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string bytes_str(const Bytes& b) { return std::string(b.begin(), b.end()); }

void put_u32(Bytes& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(p[i])) << (8 * i);
  return v;
}

// A whole decimal int64 ("-12"); false for anything else.
bool parse_i64(const Bytes& b, int64_t* out) {
  const char* end = b.data() + b.size();
  const auto r = std::from_chars(b.data(), end, *out);
  return r.ec == std::errc() && r.ptr == end && !b.empty();
}

Bytes encode(const std::vector<Bytes>& parts) {
  Bytes out;
  put_u32(out, uint32_t(parts.size()));
  for (const auto& p : parts) {
    put_u32(out, uint32_t(p.size()));
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

// Parses one frame from the front of buf. Returns 1 (frame in `parts`,
// consumed bytes erased), 0 (incomplete), -1 (garbage).
int decode(Bytes& buf, std::vector<Bytes>& parts) {
  if (buf.size() < 4) return 0;
  const uint32_t n = get_u32(buf.data());
  if (n == 0 || n > kMaxParts) return -1;
  size_t pos = 4;
  size_t total = 0;
  parts.clear();
  for (uint32_t i = 0; i < n; ++i) {
    if (buf.size() < pos + 4) return 0;
    const uint32_t len = get_u32(buf.data() + pos);
    total += len;
    if (len > kMaxFrameBytes || total > kMaxFrameBytes) return -1;
    pos += 4;
    if (buf.size() < pos + len) return 0;
    parts.emplace_back(buf.begin() + long(pos), buf.begin() + long(pos + len));
    pos += len;
  }
  buf.erase(buf.begin(), buf.begin() + long(pos));
  return 1;
}

bool send_all(int fd, const Bytes& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1000);
      continue;
    }
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  return std::string(host) + ":" + port;
}

}  // namespace

// ---- server ----

struct TcpStoreServer::State {
  struct Client {
    Bytes in;
    bool authed = false;
    std::string peer;
    int rank = -1;
  };
  struct Waiter {
    int fd;
    std::vector<std::string> keys;
  };
  std::map<int, Client> clients;
  std::map<std::string, Bytes> data;
  std::vector<Waiter> waiters;

  bool has_all(const std::vector<std::string>& keys) const {
    for (const auto& k : keys)
      if (!data.count(k)) return false;
    return true;
  }
};

TcpStoreServer::TcpStoreServer(int port, std::string token) : token_(std::move(token)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  TRIPOD_CHECK(listen_fd_ >= 0, "store: socket() failed: {}", std::strerror(errno));
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(uint16_t(port));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    ::close(listen_fd_);
    TRIPOD_CHECK_HINT(false,
                      "another job (or a previous run still exiting) holds the port; pick a free "
                      "one with --master-port / MASTER_PORT",
                      "rank 0 cannot host the rendezvous store on port {}: {}", port,
                      std::strerror(err));
  }
  TRIPOD_CHECK(::listen(listen_fd_, 1024) == 0, "store: listen() on port {} failed: {}", port,
               std::strerror(errno));
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  TRIPOD_CHECK(::pipe2(wake_, O_CLOEXEC) == 0, "store: pipe() failed: {}", std::strerror(errno));
  thread_ = std::thread([this] { run(); });
}

TcpStoreServer::~TcpStoreServer() {
  if (wake_[1] >= 0) {
    char c = 'x';
    (void)!::write(wake_[1], &c, 1);
  }
  if (thread_.joinable()) thread_.join();
  for (int fd : {listen_fd_, wake_[0], wake_[1]})
    if (fd >= 0) ::close(fd);
}

void TcpStoreServer::run() {
  State st;
  auto reply = [&](int fd, std::vector<Bytes> parts) { send_all(fd, encode(parts)); };
  auto drop = [&](int fd) {
    ::close(fd);
    st.clients.erase(fd);
    std::erase_if(st.waiters, [fd](const State::Waiter& w) { return w.fd == fd; });
  };
  auto wake_waiters = [&] {
    std::vector<int> ready;
    std::erase_if(st.waiters, [&](const State::Waiter& w) {
      if (!st.has_all(w.keys)) return false;
      ready.push_back(w.fd);
      return true;
    });
    for (int fd : ready) reply(fd, {str_bytes("READY")});
  };
  auto refuse = [&](int fd, const std::string& why) {
    ++refused_;
    log::warn("rendezvous store: refused a connection from {}: {}", st.clients[fd].peer, why);
    reply(fd, {str_bytes("REFUSED"), str_bytes(why)});
    drop(fd);
  };
  // Returns false when the client was dropped.
  auto handle = [&](int fd, std::vector<Bytes>& m) -> bool {
    State::Client& c = st.clients[fd];
    const std::string cmd = bytes_str(m[0]);
    if (!c.authed) {
      if (cmd != "HELLO" || m.size() != 3) {
        refuse(fd, "it did not start with a tripod handshake (not a tripod rank?)");
        return false;
      }
      if (bytes_str(m[1]) != token_) {
        refuse(fd, fmt::format("wrong job token (it claims rank {}); a rank of another job, or "
                               "TRIPOD_JOB_TOKEN differs between nodes",
                               bytes_str(m[2])));
        return false;
      }
      c.authed = true;
      c.rank = std::atoi(bytes_str(m[2]).c_str());
      reply(fd, {str_bytes("OK")});
      return true;
    }
    if (cmd == "SET" && m.size() == 3) {
      st.data[bytes_str(m[1])] = m[2];
      reply(fd, {str_bytes("OK")});
      wake_waiters();
    } else if (cmd == "GET" && m.size() == 2) {
      auto it = st.data.find(bytes_str(m[1]));
      if (it == st.data.end()) reply(fd, {str_bytes("MISSING")});
      else reply(fd, {str_bytes("VALUE"), it->second});
    } else if (cmd == "ADD" && m.size() == 3) {
      // The counter and the delta are decimal text; anything else (a key set
      // to other bytes, a malformed request, an overflow) is answered with an
      // ERROR, never thrown in this thread (that would end rank 0).
      const std::string key = bytes_str(m[1]);
      const auto it = st.data.find(key);
      int64_t x = 0, delta = 0;
      if ((it != st.data.end() && !it->second.empty() && !parse_i64(it->second, &x)) || !parse_i64(m[2], &delta) ||
          __builtin_add_overflow(x, delta, &x)) {
        reply(fd, {str_bytes("ERROR"), str_bytes("ADD " + bytes_str(m[1]) + ": the value or the delta is not a "
                                                 "64-bit decimal integer, or the sum overflows")});
        return true;
      }
      const Bytes& v = st.data[key] = str_bytes(std::to_string(x));
      reply(fd, {str_bytes("VALUE"), v});
      wake_waiters();
    } else if ((cmd == "CHECK" || cmd == "WAIT") && m.size() >= 2) {
      std::vector<std::string> keys;
      for (size_t i = 1; i < m.size(); ++i) keys.push_back(bytes_str(m[i]));
      if (cmd == "CHECK") reply(fd, {str_bytes(st.has_all(keys) ? "YES" : "NO")});
      else if (st.has_all(keys)) reply(fd, {str_bytes("READY")});
      else st.waiters.push_back({fd, std::move(keys)});
    } else {
      reply(fd, {str_bytes("ERROR"), str_bytes("unknown command " + cmd)});
    }
    return true;
  };

  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& [fd, c] : st.clients) fds.push_back({fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      log::error("rendezvous store: poll failed: {}", std::strerror(errno));
      break;
    }
    if (fds[0].revents) break;
    if (fds[1].revents & POLLIN) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        st.clients[fd].peer = peer_name(fd);
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      const int fd = fds[i].fd;
      char buf[65536];
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        drop(fd);
        continue;
      }
      auto& in = st.clients[fd].in;
      in.insert(in.end(), buf, buf + n);
      std::vector<Bytes> parts;
      for (;;) {
        int r = decode(st.clients[fd].in, parts);
        if (r == 0) break;
        if (r < 0) {
          if (st.clients[fd].authed) drop(fd);
          else refuse(fd, "malformed data instead of a tripod handshake (not a tripod rank?)");
          break;
        }
        if (!handle(fd, parts)) break;
      }
    }
  }
  for (auto& [fd, c] : st.clients) ::close(fd);
}

// ---- client ----

TcpStore::TcpStore(std::string host, int port, std::string token, int rank, Millis timeout)
    : Store(timeout), host_(std::move(host)), port_(port), token_(std::move(token)), rank_(rank) {
  std::lock_guard<std::mutex> lock(mu_);
  connect_locked(timeout);
}

TcpStore::~TcpStore() {
  std::lock_guard<std::mutex> lock(mu_);
  close_locked();
}

std::string TcpStore::endpoint() const { return host_ + ":" + std::to_string(port_); }

void TcpStore::close_locked() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

// Receives one frame before the deadline. Returns false on timeout; throws
// on a closed connection.
bool recv_frame(int fd, Clock::time_point deadline, std::vector<Bytes>& parts, Bytes& buf,
                const std::string& endpoint) {
  for (;;) {
    int r = decode(buf, parts);
    if (r == 1) return true;
    TRIPOD_CHECK(r == 0, "rendezvous store at {} sent malformed data", endpoint);
    auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int pr = ::poll(&p, 1, int(std::min<long>(left, 1000)));
    if (pr < 0 && errno != EINTR) TRIPOD_FAIL("store poll failed: {}", std::strerror(errno));
    if (pr <= 0) continue;
    char tmp[65536];
    ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error(fmt::format("lost the connection to the rendezvous store at {} (rank 0 exited "
                              "or failed?)",
                              endpoint),
                  "look at rank 0's output for its error");
    buf.insert(buf.end(), tmp, tmp + n);
  }
}

}  // namespace

int tcp_connect(const std::string& host, int port, Millis timeout, std::string& last_error,
                int& attempts) {
  const auto deadline = Clock::now() + timeout;
  last_error = "no attempt";
  attempts = 0;
  Millis backoff{50};
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int out = -1;
  while (Clock::now() < deadline) {
    ++attempts;
    addrinfo* res = nullptr;
    int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (gai != 0) {
      last_error = std::string("cannot resolve host: ") + ::gai_strerror(gai);
    }
    for (addrinfo* a = res; a && out < 0; a = a->ai_next) {
      int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
      if (fd < 0) continue;
      int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
        pollfd p{fd, POLLOUT, 0};
        rc = ::poll(&p, 1, int(std::clamp<long>(left, 1, 2000))) == 1 ? 0 : -1;
        int err = rc == 0 ? 0 : ETIMEDOUT;
        socklen_t len = sizeof(err);
        if (rc == 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        errno = err;
        rc = err == 0 ? 0 : -1;
      }
      if (rc == 0) {
        out = fd;
      } else {
        last_error = std::strerror(errno);
        ::close(fd);
      }
    }
    if (res) ::freeaddrinfo(res);
    if (out >= 0) break;
    std::this_thread::sleep_for(std::min(backoff, std::chrono::duration_cast<Millis>(
                                                      deadline - Clock::now() + Millis{1})));
    backoff = std::min(backoff * 2, Millis{1000});
  }
  if (out < 0) return -1;
  // Blocking from here on; deadlines come from poll().
  ::fcntl(out, F_SETFL, ::fcntl(out, F_GETFL) & ~O_NONBLOCK);
  int one = 1;
  ::setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return out;
}

std::string socket_local_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  char host[NI_MAXHOST] = "127.0.0.1";
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0)
    ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST);
  return host;
}

void TcpStore::connect_locked(Millis timeout) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + timeout;
  std::string last_error;
  int attempts = 0;
  fd_ = tcp_connect(host_, port_, timeout, last_error, attempts);
  if (fd_ < 0) {
    const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
    throw TimeoutError(
        fmt::format("rank {} could not reach the rendezvous store at {}:{} (MASTER_ADDR:MASTER_PORT) "
                    "after {:.1f} s and {} attempts; last error: {}",
                    rank_, host_, port_, waited, attempts, last_error),
        fmt::format("is rank 0 running and did it start the store? Is port {} open between the "
                    "nodes (try `nc -zv {} {}` from this node)? Across nodes MASTER_ADDR must be "
                    "rank 0's address, not localhost/127.0.0.1. Raise "
                    "--distributed-timeout-minutes if rank 0 starts late.",
                    port_, host_, port_));
  }
  local_addr_ = socket_local_address(fd_);

  TRIPOD_CHECK(send_all(fd_, encode({str_bytes("HELLO"), str_bytes(token_),
                                     str_bytes(std::to_string(rank_))})),
               "rank {}: sending the handshake to the store at {} failed", rank_, endpoint());
  std::vector<Bytes> parts;
  Bytes buf;
  if (!recv_frame(fd_, std::max(deadline, Clock::now() + Millis{5000}), parts, buf, endpoint()))
    throw TimeoutError(fmt::format("rank {}: the store at {} did not answer the handshake", rank_,
                                   endpoint()));
  if (bytes_str(parts[0]) == "REFUSED") {
    close_locked();
    throw Error(fmt::format("rank {}: the rendezvous store at {} refused this process: {}", rank_,
                            endpoint(), parts.size() > 1 ? bytes_str(parts[1]) : "?"),
                "all ranks of a job must share TRIPOD_JOB_TOKEN (tripod launch sets it); another "
                "job may be using this MASTER_PORT");
  }
}

std::vector<Bytes> TcpStore::request(const std::vector<Bytes>& parts, Millis timeout,
                                     const char* what, const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  const Millis t = effective(timeout);
  if (fd_ < 0) connect_locked(timeout_);
  TRIPOD_CHECK(send_all(fd_, encode(parts)), "rank {}: lost the connection to the store at {}",
               rank_, endpoint());
  std::vector<Bytes> reply;
  Bytes buf;
  if (!recv_frame(fd_, Clock::now() + t, reply, buf, endpoint())) {
    // The answer may still come; this connection is out of step, so drop it.
    close_locked();
    throw TimeoutError(fmt::format("rank {}: store {} at {} timed out after {:.1f} s for key(s) {}",
                                   rank_, what, endpoint(), t.count() / 1e3, join_keys(keys)));
  }
  TRIPOD_CHECK(bytes_str(reply[0]) != "ERROR", "store at {}: {}", endpoint(),
               reply.size() > 1 ? bytes_str(reply[1]) : "error");
  return reply;
}

void TcpStore::set(const std::string& key, const Bytes& value) {
  request({str_bytes("SET"), str_bytes(key), value}, Millis{0}, "set", {key});
}

Bytes TcpStore::get(const std::string& key, Millis timeout) {
  wait({key}, timeout);
  auto r = request({str_bytes("GET"), str_bytes(key)}, Millis{0}, "get", {key});
  TRIPOD_CHECK(bytes_str(r[0]) == "VALUE" && r.size() == 2, "store: key '{}' vanished", key);
  return r[1];
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  auto r = request({str_bytes("ADD"), str_bytes(key), str_bytes(std::to_string(delta))}, Millis{0},
                   "add", {key});
  int64_t v = 0;
  TRIPOD_CHECK(r.size() == 2 && parse_i64(r[1], &v), "store at {}: malformed answer to add of '{}'", endpoint(), key);
  return v;
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  std::vector<Bytes> parts{str_bytes("CHECK")};
  for (const auto& k : keys) parts.push_back(str_bytes(k));
  return bytes_str(request(parts, Millis{0}, "check", keys)[0]) == "YES";
}

void TcpStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  std::vector<Bytes> parts{str_bytes("WAIT")};
  for (const auto& k : keys) parts.push_back(str_bytes(k));
  request(parts, timeout, "wait", keys);
}

}  // namespace tripod::comm
