// Stores: HashStore / FileStore / TcpStore semantics, wait timeouts, the job
// token (strangers refused and logged), and the unreachable-address error.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "base/error.h"
#include "comm/store.h"
#include "comm/tcp_store.h"

using namespace tripod;
using namespace tripod::comm;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

static double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The same contract for every store: set/get, add, check, wait wakes up on
// a set from another thread, wait times out naming the key.
static void exercise(Store& a, Store& b) {
  a.set_str("x", "hello");
  EXPECT_EQ(b.get_str("x"), "hello");
  EXPECT_EQ(a.add("n", 5), 5);
  EXPECT_EQ(b.add("n", -2), 3);
  EXPECT_EQ(a.get_str("n"), "3");
  EXPECT_TRUE(b.check({"x", "n"}));
  EXPECT_FALSE(b.check({"x", "missing"}));
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    a.set_str("late", "v");
  });
  auto t0 = Clock::now();
  b.wait({"late"}, 5000ms);
  EXPECT_LT(since(t0), 4.0);
  t.join();
  t0 = Clock::now();
  try {
    b.get("never", 300ms);
    ADD_FAILURE() << "get of a missing key returned";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos) << e.what();
  }
  EXPECT_GE(since(t0), 0.29);
  EXPECT_LT(since(t0), 3.0);
  // Binary values survive.
  Bytes bin = {'\0', '\xff', '\n', 'a'};
  a.set("bin", bin);
  EXPECT_EQ(b.get("bin"), bin);
}

TEST(Store, HashStore) {
  HashStore s;
  exercise(s, s);
}

TEST(Store, PrefixStoreIsolates) {
  auto base = std::make_shared<HashStore>();
  PrefixStore p1("g1/", base), p2("g2/", base);
  p1.set_str("k", "1");
  EXPECT_FALSE(p2.check({"k"}));
  EXPECT_EQ(base->get_str("g1/k"), "1");
  exercise(p1, p1);
}

TEST(Store, FileStore) {
  auto dir = std::filesystem::temp_directory_path() / ("tripod_fs_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  {
    FileStore a(dir.string()), b(dir.string());
    exercise(a, b);
    a.set_str("a/b c", "slash");  // keys with '/' and spaces
    EXPECT_EQ(b.get_str("a/b c"), "slash");
  }
  std::filesystem::remove_all(dir);
}

TEST(Store, TcpStoreAcrossClients) {
  TcpStoreServer server(0, "tok");
  TcpStore a("127.0.0.1", server.port(), "tok", 0, 5000ms);
  TcpStore b("127.0.0.1", server.port(), "tok", 1, 5000ms);
  exercise(a, b);
  EXPECT_EQ(a.local_address(), "127.0.0.1");
  // After a timed-out wait the client reconnects and stays usable.
  EXPECT_EQ(b.get_str("x"), "hello");
  // Many concurrent adders.
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&, i] {
      TcpStore c("127.0.0.1", server.port(), "tok", i, 5000ms);
      for (int k = 0; k < 50; ++k) c.add("count", 1);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(a.get_str("count"), "400");
  EXPECT_EQ(server.refused_connections(), 0);
}

// Found by fuzzing the wire protocol (tests/fuzz/fuzz_store_wire.cpp): an ADD
// to a key that holds other bytes threw std::invalid_argument in the server
// thread and ended rank 0. Now the client gets an error and the server lives.
TEST(Store, AddToANonNumberIsAnErrorNotACrash) {
  TcpStoreServer server(0, "tok");
  TcpStore a("127.0.0.1", server.port(), "tok", 0, 5000ms);
  a.set("addr", Bytes{'h', 'o', 's', 't'});
  EXPECT_THROW(a.add("addr", 1), Error);
  a.set("big", Bytes{'9', '2', '2', '3', '3', '7', '2', '0', '3', '6', '8', '5', '4', '7', '7', '5', '8', '0', '7'});
  EXPECT_THROW(a.add("big", 1), Error);  // INT64_MAX + 1
  EXPECT_FALSE(a.check({"fresh"}));
  EXPECT_EQ(a.add("fresh", -3), -3);
  EXPECT_EQ(a.add("fresh", 5), 2);
}

TEST(Store, WrongTokenIsRefusedAndLogged) {
  TcpStoreServer server(0, "right");
  TcpStore ok("127.0.0.1", server.port(), "right", 0, 5000ms);
  ok.set_str("secret", "v");
  auto t0 = Clock::now();
  try {
    TcpStore bad("127.0.0.1", server.port(), "wrong", 3, 5000ms);
    ADD_FAILURE() << "a client with the wrong token was accepted";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("refused"), std::string::npos) << m;
    EXPECT_NE(m.find("wrong job token"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 3"), std::string::npos) << m;
  }
  EXPECT_LT(since(t0), 2.0);  // refused at once, not retried
  // A non-tripod client (an HTTP probe) is refused too.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(server.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const char probe[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(::send(fd, probe, sizeof(probe) - 1, 0), 0);
  char buf[256];
  while (::recv(fd, buf, sizeof(buf), 0) > 0) {
  }  // the server closes the connection
  ::close(fd);
  for (int i = 0; i < 100 && server.refused_connections() < 2; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server.refused_connections(), 2);
  EXPECT_EQ(ok.get_str("secret"), "v");  // the job's own client is unaffected
}

static int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(Store, UnreachableAddressFailsInsideTheTimeoutWithTheChecklist) {
  const int port = free_port();  // nothing listens there
  auto t0 = Clock::now();
  try {
    TcpStore s("127.0.0.1", port, "tok", 5, 1500ms);
    ADD_FAILURE() << "connected to a port nobody listens on";
  } catch (const TimeoutError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("rank 5"), std::string::npos) << m;
    EXPECT_NE(m.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << m;
    EXPECT_NE(m.find("nc -zv 127.0.0.1 " + std::to_string(port)), std::string::npos) << m;
    EXPECT_NE(m.find("MASTER_ADDR"), std::string::npos) << m;
    EXPECT_NE(m.find("refused"), std::string::npos) << m;  // the last socket error
  }
  const double s = since(t0);
  EXPECT_GE(s, 1.4);
  EXPECT_LT(s, 3.0);
}

TEST(Store, ServerOnTakenPortNamesIt) {
  TcpStoreServer first(0, "t");
  try {
    TcpStoreServer second(first.port(), "t");
    ADD_FAILURE() << "two servers on one port";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(std::to_string(first.port())), std::string::npos) << m;
    EXPECT_NE(m.find("--master-port"), std::string::npos) << m;
  }
}

TEST(Store, ClientRetriesUntilTheServerComesUp) {
  const int port = free_port();
  std::unique_ptr<TcpStoreServer> server;
  std::thread t([&] {
    std::this_thread::sleep_for(400ms);
    server = std::make_unique<TcpStoreServer>(port, "t");
  });
  TcpStore c("127.0.0.1", port, "t", 1, 5000ms);
  c.set_str("k", "v");
  EXPECT_EQ(c.get_str("k"), "v");
  t.join();
}
