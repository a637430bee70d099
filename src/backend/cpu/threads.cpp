// configure_cpu_threads (backend/ops.h): one place that sizes the OpenMP and
// OpenBLAS thread pools of a rank.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <thread>

#include "backend/ops.h"
#include "base/env.h"

namespace tripod::backend {

int configure_cpu_threads(int local_world_size) {
  int n = static_cast<int>(env::get_int_or("OMP_NUM_THREADS", 0));
  if (n <= 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    n = std::max(1, cores / std::max(1, local_world_size));
  }
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
  return n;
}

}  // namespace tripod::backend
