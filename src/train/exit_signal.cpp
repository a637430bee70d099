// Implementation of train/exit_signal.h (POSIX signals). See NOTE [Exit signal].
#include "train/exit_signal.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

namespace tripod::train {
namespace {

std::atomic<int> g_signal{0};

void say(const char* text) {
  size_t n = 0;
  while (text[n]) ++n;
  const ssize_t ignored = ::write(STDERR_FILENO, text, n);  // async-signal-safe
  (void)ignored;
}

void on_exit_signal(int sig) {
  int none = 0;
  if (g_signal.compare_exchange_strong(none, sig)) {
    say(sig == SIGINT ? "tripod: SIGINT received: stopping after this iteration (saving with --save); send it "
                        "again to stop at once without saving\n"
                      : "tripod: SIGTERM received: stopping after this iteration (saving with --save); send it "
                        "again to stop at once without saving\n");
    return;
  }
  say(sig == SIGINT ? "tripod: second signal (SIGINT): stopping now, without a checkpoint\n"
                    : "tripod: second signal (SIGTERM): stopping now, without a checkpoint\n");
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void install_exit_signal_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_exit_signal;
  sa.sa_flags = SA_RESTART;  // system calls in flight (sockets, files) go on
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
}

int exit_signal_received() { return g_signal.load(); }

const char* signal_name(int sig) {
  if (sig == SIGTERM) return "SIGTERM";
  if (sig == SIGINT) return "SIGINT";
  static thread_local char buf[24];
  std::snprintf(buf, sizeof buf, "signal %d", sig);
  return buf;
}

}  // namespace tripod::train
