// Fuzz target: the wire protocol of tripod's rendezvous store server
// (comm/tcp_store.h). Each input is sent, as one connection's bytes, to a
// fresh TcpStoreServer (job token "fuzz-token"); the target then reads the
// replies until the server closes the connection. Any exception or crash in
// the server thread takes the process down and is reported.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "base/log.h"
#include "comm/tcp_store.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tripod;
  static const bool quiet = [] {
    log::set_level(log::Level::Error);  // refusals are logged as warnings
    return true;
  }();
  (void)quiet;
  comm::TcpStoreServer server(0, "fuzz-token");
  std::string err;
  int attempts = 0;
  const int fd = comm::tcp_connect("127.0.0.1", server.port(), comm::Millis{5000}, err, attempts);
  TRIPOD_CHECK(fd >= 0, "fuzz: cannot connect to the store: {}", err);
  size_t off = 0;
  while (off < size) {
    const ssize_t n = ::send(fd, data + off, size - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;  // libFuzzer's timer (SIGALRM)
    if (n <= 0) break;  // the server refused and closed
    off += size_t(n);
  }
  ::shutdown(fd, SHUT_WR);
  char buf[65536];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {  // until the server closes (it does on EOF), at most 5 s
    if (std::chrono::steady_clock::now() > deadline) __builtin_trap();  // the server hangs on this input
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, 100);
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;  // (EINTR: libFuzzer's SIGALRM)
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
  }
  ::close(fd);
  return 0;
}
