// Implementation of base/fault_injection.h.
#include "base/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "base/debug_config.h"

namespace tripod {

void inject_rank_fault(int global_rank, int64_t iteration) {
  const DebugConfig& c = debug_config();
  if (c.fault_kind.empty() || c.fault_rank != global_rank || c.fault_iteration != iteration) return;
  std::fprintf(stderr, "TRIPOD_FAULT: rank %d: %s before iteration %lld\n", global_rank, c.fault_kind.c_str(),
               static_cast<long long>(iteration));
  std::fflush(stderr);
  if (c.fault_kind == "kill") ::raise(SIGKILL);
  if (c.fault_kind == "stop") ::raise(SIGSTOP);  // resumes only on SIGCONT; SIGKILL still ends it
  if (c.fault_kind == "exit") ::_exit(1);
  if (c.fault_kind == "abort") std::abort();
  if (c.fault_kind == "throw") {
    std::thread([] { throw std::runtime_error("TRIPOD_FAULT: an exception escaping a thread"); }).join();
  }
}

}  // namespace tripod
