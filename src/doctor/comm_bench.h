// The measuring behind `tripod bench comm`, in the spirit of nccl-tests:
// per collective and size, a data check against the analytic result, then
// the time, algbw and busbw over one group of the job.
//
// Bandwidths are defined exactly as nccl-tests' doc/PERFORMANCE.md:
//   algbw = S / t, S = bytes of the full buffer (all_gather: the gathered
//           output; reduce_scatter: the input), t = time of one op
//   busbw = algbw x factor: all_reduce 2(n-1)/n, all_gather and
//           reduce_scatter (n-1)/n, broadcast and send/recv 1.
// t is the slowest rank's mean over `iters`.
//
// Relates to: cli/bench.cpp (the flags and the printed table),
// doctor/comm_check.h (doctor's short all-reduce sweep, same definitions),
// docs/distributed.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "comm/communicator.h"

namespace tripod::doctor {

struct CommBenchOptions {
  std::vector<std::string> ops;  // all_reduce, all_gather, reduce_scatter, broadcast, sendrecv
  int64_t min_bytes = 8, max_bytes = 16 << 20;
  int step_factor = 4;           // sizes min_bytes, x step_factor, ... <= max_bytes
  int iters = 10, warmup = 3;
  int size_mismatch_rank = -1;   // fault injection: this global rank's buffers are twice the others'
};

// One measured op and size (every rank gets the same numbers).
struct CommBenchRow {
  std::string op;
  int64_t bytes = 0;       // S of the definitions above
  double seconds = 0;      // t: one op, slowest rank's mean
  double algbw_gbs = 0, busbw_gbs = 0;
  int64_t wrong = 0;       // elements that differ from the analytic value, over all ranks
};

// The largest all_reduce, for `tripod plan --links`.
struct CommBenchLinks {
  int64_t bytes = 0;
  double busbw_gbs = 0;
  bool spans_nodes = false;  // the group holds ranks of more than one node
  // The largest all_to_all's (0: not in --ops): the MoE token exchange's
  // link figure for `tripod plan`.
  int64_t all_to_all_bytes = 0;
  double all_to_all_busbw_gbs = 0;
};

// nccl-tests' bus bandwidth factor of `op` over n ranks.
double bus_factor(const std::string& op, int n);

// Runs every op of `options` over `group` at every size (every rank of
// `world` calls it with the same options; sendrecv is skipped on a group of
// one). `be`: the device backend whose buffers the communicator moves (null:
// host tensors, for the CPU communicator). `on_row` is called with each row
// as soon as it is measured. Throws naming the count when any data check
// found a wrong element. With `links`, also measures whether `group` spans
// nodes (nodes hold local_world_size consecutive global ranks) and fills it.
void bench_collectives(const CommBenchOptions& options, comm::Communicator& group, comm::Communicator& world,
                       int global_rank, backend::Backend* be, const std::function<void(const CommBenchRow&)>& on_row,
                       int local_world_size = 1, CommBenchLinks* links = nullptr);

}  // namespace tripod::doctor
