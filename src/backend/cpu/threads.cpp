// configure_cpu_threads (backend/cpu/cpu_backend.h): one place that sizes the OpenMP and
// OpenBLAS thread pools of a rank.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "base/env.h"
#include "base/log.h"

namespace tripod::backend {

int configure_cpu_threads(int local_world_size) {
  int n = static_cast<int>(env::get_int_or("OMP_NUM_THREADS", 0));
  if (n <= 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    n = std::max(1, cores / std::max(1, local_world_size));
  }
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
  // Every op is an OpenMP region that waits for its slowest thread: when
  // other processes already keep the cores busy, a descheduled thread
  // stalls each region for a scheduler slice, and a small model measured
  // 17x slower with 2 threads than with 1 on a busy 2-core machine. Say so
  // once, with the fix, when the load already fills the cores.
  double load[1] = {0};
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (n > 1 && getloadavg(load, 1) == 1 && load[0] >= cores)
    log::warn("CPU busy: load average {:.1f} on {} cores before this rank's {} threads; OpenMP regions stall when "
              "oversubscribed (often 10x slower): set OMP_NUM_THREADS to the free cores (1 on a busy machine)",
              load[0], cores, n);
  return n;
}

}  // namespace tripod::backend
