// Helpers for tests that run tripod under real launchers: run a shell
// command with a deadline (killing its whole process group on expiry) and
// collect its exit code, combined output and wall time.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace tripod::testing {

struct RunResult {
  int code = -1;        // exit code; 128 + signal when killed; -1 on deadline
  std::string output;   // stdout + stderr
  double seconds = 0;
  bool timed_out = false;
};

inline std::string tripod_bin() {
  const char* b = std::getenv("TRIPOD_BIN");
  return b ? b : "tripod";
}

inline std::string temp_dir(const std::string& tag) {
  auto d = std::filesystem::temp_directory_path() /
           ("tripod_" + tag + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline int free_port() {
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

// Runs `/bin/sh -c cmd`; `on_start(pid)` may signal it (e.g. SIGTERM).
template <typename OnStart>
RunResult run_shell(const std::string& cmd, double deadline_s, OnStart on_start) {
  const std::string out = temp_dir("run") + "/out.txt";
  RunResult r;
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    int fd = ::open(out.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  on_start(pid);
  int status = 0;
  for (;;) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > deadline_s) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::kill(-pid, SIGKILL);  // leftovers of the group, if any
  r.code = r.timed_out ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.output = read_file(out);
  return r;
}

inline RunResult run_shell(const std::string& cmd, double deadline_s) {
  return run_shell(cmd, deadline_s, [](pid_t) {});
}

inline bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

}  // namespace tripod::testing
