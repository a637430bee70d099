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
    if (n <= 0) break;  // the server refused and closed
    off += size_t(n);
  }
  ::shutdown(fd, SHUT_WR);
  char buf[65536];
  for (;;) {  // until the server closes (it does on EOF), at most 5 s
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) __builtin_trap();  // the server hangs on this input
    if (::recv(fd, buf, sizeof(buf), 0) <= 0) break;
  }
  ::close(fd);
  return 0;
}
