// Implementation of launch/launch.h: fork and exec of each rank in its own
// process group, its stdout/stderr through pipes and one poll loop that
// prefixes lines, reaps exits, forwards signals and stops the other ranks
// when one fails.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "launch/launch.h"

namespace tripod::launch {
namespace {

volatile sig_atomic_t g_signal = 0;        // the latest signal received
volatile sig_atomic_t g_signal_count = 0;  // how many were received
void on_signal(int sig) {
  g_signal = sig;
  g_signal_count = g_signal_count + 1;
}

struct Rank {
  int global = 0;
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;
  std::string out_buf, err_buf;
  bool running = false;
  int exit_code = 0;  // 128 + signal when killed
};

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return 29500;
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string random_token() {
  unsigned char b[16] = {};
  std::ifstream("/dev/urandom", std::ios::binary).read(reinterpret_cast<char*>(b), sizeof(b));
  std::string s;
  for (unsigned char c : b) s += fmt::format("{:02x}", c);
  return s;
}

void emit(FILE* f, int rank, const std::string& line) {
  std::string s = fmt::format("[rank {}] {}\n", rank, line);
  std::fwrite(s.data(), 1, s.size(), f);
  std::fflush(f);
}

// Reads what is available on fd; prints whole lines. Returns false at EOF.
bool pump(int fd, std::string& buf, FILE* f, int rank) {
  char tmp[65536];
  ssize_t n = ::read(fd, tmp, sizeof(tmp));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    if (!buf.empty()) emit(f, rank, buf);
    buf.clear();
    return false;
  }
  buf.append(tmp, size_t(n));
  size_t pos;
  while ((pos = buf.find('\n')) != std::string::npos) {
    emit(f, rank, buf.substr(0, pos));
    buf.erase(0, pos + 1);
  }
  return true;
}

pid_t spawn(const std::string& exe, const std::vector<std::string>& args,
            const std::vector<std::pair<std::string, std::string>>& env, int& out_fd, int& err_fd) {
  int out[2], err[2];
  TRIPOD_CHECK(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0, "pipe failed: {}",
               std::strerror(errno));
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  TRIPOD_CHECK(pid >= 0, "fork failed: {}", std::strerror(errno));
  if (pid == 0) {
    // Own process group, so a signal to the group reaches the rank's children
    // too; and die with the launcher even if it is SIGKILLed.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::execv(exe.c_str(), argv.data());
    std::fprintf(stderr, "tripod launch: cannot execute %s: %s\n", exe.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent, to avoid the race
  ::close(out[1]);
  ::close(err[1]);
  out_fd = out[0];
  err_fd = err[0];
  return pid;
}

struct LaunchArgs {
  int nproc = 1, nnodes = 1, node_rank = 0, master_port = 0;
  std::string master_addr = "127.0.0.1";
  double kill_grace_s = 3.0;
  std::vector<std::string> command;
};

int supervise(std::vector<Rank>& ranks, double grace_s) {
  using Clock = std::chrono::steady_clock;
  int failed = -1;                 // index of the first failing rank
  bool failed_by_signal = false;   // that failure was a signal from outside, the likely root cause
  int forwarded = 0;               // the first signal we forwarded
  int forwarded_count = 0;         // how many we forwarded
  Clock::time_point stop_at{};     // when we began stopping the others
  bool stopping = false, killed = false;
  Clock::time_point second_term_at{};  // stopping after a failure: the second SIGTERM (NOTE [Exit signal])
  Clock::time_point all_done_at{};
  auto signal_all = [&](int sig) {
    for (auto& r : ranks)
      if (r.running) ::kill(-r.pid, sig);
  };
  for (;;) {
    // NOTE [Forwarded signals]: each SIGINT / SIGTERM to the launcher goes to
    // every rank. The first lets training ranks finish their iteration and
    // save (train/exit_signal.h), so no kill follows it; a second one stops
    // them at once, and after it the launcher SIGKILLs what is left after
    // --kill-grace seconds.
    if (g_signal_count > forwarded_count) {
      const int sig = g_signal;
      forwarded_count = g_signal_count;
      if (!forwarded) forwarded = sig;
      std::fprintf(stderr, "tripod launch: got %s, forwarding it to every rank%s\n",
                   sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal",
                   forwarded_count > 1 ? " (again: they stop at once)" : "");
      signal_all(sig);
      if (forwarded_count > 1 && !stopping) {
        stopping = true;
        stop_at = Clock::now();
      }
    }
    if (second_term_at != Clock::time_point{} && Clock::now() >= second_term_at) {
      // Ranks that handle SIGTERM stop at the second one (two signals sent
      // together may arrive as one).
      signal_all(SIGTERM);
      second_term_at = {};
    }
    std::vector<pollfd> fds;
    std::vector<std::pair<size_t, bool>> who;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i].out_fd >= 0) fds.push_back({ranks[i].out_fd, POLLIN, 0}), who.push_back({i, true});
      if (ranks[i].err_fd >= 0) fds.push_back({ranks[i].err_fd, POLLIN, 0}), who.push_back({i, false});
    }
    ::poll(fds.data(), fds.size(), 50);
    for (size_t k = 0; k < fds.size(); ++k) {
      if (!fds[k].revents) continue;
      Rank& r = ranks[who[k].first];
      int& fd = who[k].second ? r.out_fd : r.err_fd;
      if (!pump(fd, who[k].second ? r.out_buf : r.err_buf, who[k].second ? stdout : stderr, r.global)) {
        ::close(fd);
        fd = -1;
      }
    }
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (size_t i = 0; i < ranks.size(); ++i) {
        Rank& r = ranks[i];
        if (r.pid != pid) continue;
        r.running = false;
        r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (r.exit_code != 0 && failed < 0 && !forwarded) {
          failed = int(i);
          failed_by_signal = WIFSIGNALED(status);
          std::fprintf(stderr, "tripod launch: rank %d (pid %d) %s %d; stopping the other ranks\n",
                       r.global, int(pid), WIFEXITED(status) ? "exited with code" : "was killed by signal",
                       WIFEXITED(status) ? r.exit_code : WTERMSIG(status));
          signal_all(SIGTERM);
          second_term_at = Clock::now() + std::chrono::milliseconds(100);
          stopping = true;
          stop_at = Clock::now();
        } else if (failed >= 0 && !failed_by_signal && !killed && WIFSIGNALED(status) &&
                   WTERMSIG(status) != SIGTERM) {
          // A rank that a signal killed from outside (not our SIGTERM) while
          // another had just failed with an error is the likely cause: the
          // others' errors are its peers losing their connections to it. On a
          // loaded machine their exits can be reaped first.
          failed = int(i);
          failed_by_signal = true;
          std::fprintf(stderr, "tripod launch: rank %d (pid %d) was killed by signal %d (the likely cause "
                       "of the failure above)\n", r.global, int(pid), WTERMSIG(status));
        }
      }
    }
    bool any_running = false;
    for (auto& r : ranks) any_running |= r.running;
    if (stopping && !killed && any_running &&
        std::chrono::duration<double>(Clock::now() - stop_at).count() > grace_s) {
      signal_all(SIGKILL);
      killed = true;
    }
    bool open_pipes = false;
    for (auto& r : ranks) open_pipes |= r.out_fd >= 0 || r.err_fd >= 0;
    if (!any_running) {
      // A rank's own children may hold its pipes open: drain for at most 1 s.
      if (all_done_at == Clock::time_point{}) all_done_at = Clock::now();
      if (!open_pipes || std::chrono::duration<double>(Clock::now() - all_done_at).count() > 1.0) break;
    }
  }
  if (failed >= 0) {
    const Rank& r = ranks[size_t(failed)];
    std::fprintf(stderr, "tripod launch: failed: rank %d exited with code %d (%s; the "
                 "other ranks were stopped)\n", r.global, r.exit_code,
                 failed_by_signal ? "killed from outside" : "first failure");
    return r.exit_code;
  }
  // After a forwarded signal: the ranks' own status (0 when they saved and
  // exited cleanly under --exit-signal-handler, 128 + the signal otherwise).
  for (const auto& r : ranks)
    if (r.exit_code != 0) return r.exit_code;
  return 0;
}

}  // namespace

int launch(LaunchOptions a) {
  TRIPOD_CHECK_HINT(!a.command.empty(), "e.g. tripod launch --nproc-per-node 8 train --tensor-model-parallel-size 2 ...",
                    "tripod launch: no subcommand to run");
  TRIPOD_CHECK(a.nproc_per_node >= 1, "--nproc-per-node must be >= 1, got {}", a.nproc_per_node);
  TRIPOD_CHECK(a.nnodes >= 1, "--nnodes must be >= 1, got {}", a.nnodes);
  TRIPOD_CHECK(a.node_rank >= 0 && a.node_rank < a.nnodes, "--node-rank {} is not in [0, --nnodes {})",
               a.node_rank, a.nnodes);
  if (a.master_port == 0) {
    const char* p = std::getenv("MASTER_PORT");
    a.master_port = p && *p ? std::atoi(p) : a.nnodes == 1 ? free_port() : 29500;
  }
  const char* tok = std::getenv("TRIPOD_JOB_TOKEN");
  // Across nodes every launcher must hand out the same token: take the
  // user's, else let the ranks derive one from MASTER_ADDR:PORT (see
  // NOTE [Job token] in comm/rendezvous.h).
  const std::string token = tok && *tok ? tok : a.nnodes == 1 ? random_token() : "";
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  TRIPOD_CHECK(n > 0, "cannot find the tripod executable: {}", std::strerror(errno));
  exe[n] = '\0';

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  const int world = a.nproc_per_node * a.nnodes;
  std::vector<std::string> args = {"tripod"};
  args.insert(args.end(), a.command.begin(), a.command.end());
  std::vector<Rank> ranks(static_cast<size_t>(a.nproc_per_node));
  const bool set_omp = std::getenv("OMP_NUM_THREADS") == nullptr;
  const int omp = std::max(1u, std::thread::hardware_concurrency() / unsigned(a.nproc_per_node));
  for (int i = 0; i < a.nproc_per_node; ++i) {
    Rank& r = ranks[size_t(i)];
    r.global = a.node_rank * a.nproc_per_node + i;
    std::vector<std::pair<std::string, std::string>> env = {
        {"RANK", std::to_string(r.global)},       {"WORLD_SIZE", std::to_string(world)},
        {"LOCAL_RANK", std::to_string(i)},        {"LOCAL_WORLD_SIZE", std::to_string(a.nproc_per_node)},
        {"GROUP_RANK", std::to_string(a.node_rank)}, {"MASTER_ADDR", a.master_addr},
        {"MASTER_PORT", std::to_string(a.master_port)}, {"TRIPOD_LAUNCHER", "tripod"}};
    if (!token.empty()) env.push_back({"TRIPOD_JOB_TOKEN", token});
    // As torchrun: N ranks sharing the cores should not each start all-core
    // thread pools.
    if (set_omp) env.push_back({"OMP_NUM_THREADS", std::to_string(omp)});
    r.pid = spawn(exe, args, env, r.out_fd, r.err_fd);
    r.running = true;
  }
  return supervise(ranks, a.kill_grace_s);
}

}  // namespace tripod::launch
