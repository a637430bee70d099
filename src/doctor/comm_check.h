// The collective bandwidth check of `tripod doctor` under a launcher: a
// short all-reduce sweep over the job's world group, with a data check, and
// bus bandwidth exactly as nccl-tests defines it (busbw = S/t x 2(n-1)/n,
// t = the slowest rank's mean time). Same definitions as `tripod bench comm`.
//
// Relates to: doctor/comm_bench.h (the full benchmark), doctor/checks.h.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "doctor/checks.h"

namespace tripod::doctor {

struct BandwidthPoint {
  int64_t bytes = 0;
  double seconds = 0;  // one all-reduce, slowest rank's mean
  double algbw_gbs = 0, busbw_gbs = 0;
  int64_t wrong = 0;   // elements that differ from the analytic sum, over all ranks
};

// Collective over `world` (every rank calls it with the same sizes). `be`:
// the device backend whose buffers the communicator moves (null: host
// tensors, for the CPU communicator).
std::vector<BandwidthPoint> measure_all_reduce(comm::Communicator& world, backend::Backend* be,
                                               const std::vector<int64_t>& sizes_bytes, int iters);
// pass with the numbers; fail when any element was wrong.
CheckResult check_all_reduce(const std::vector<BandwidthPoint>& points, int ranks, const std::string& transport);

}  // namespace tripod::doctor
