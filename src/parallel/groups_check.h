// A self-test of a job's process groups: every collective on every group of
// the layout, checked against analytically known values (sums of ranks,
// gathered rank ids). Used by `tripod bench comm --check` (so the real
// launchers can drive it) and by the threads-as-ranks unit tests.
//
// Relates to: parallel/groups.h, cli/bench.cpp, tests/comm/.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "parallel/groups.h"

namespace tripod::parallel {

struct GroupCheckReport {
  int groups_checked = 0;
  int64_t ops_checked = 0;
  int64_t bytes_checked = 0;
};

// Element counts exercised by default: 1 element up to ~6 MB of f32, odd sizes.
std::vector<int64_t> default_check_sizes();

// Where the checked buffers live when the communicators move device memory
// (NCCL, or Gloo/IPC staging a GPU's buffers): the values are written on the
// host, copied to `device` before each collective and back after it.
// copy(dst, src) copies between the host and the device; sync() waits for it.
struct CheckDevice {
  Device device;
  std::function<void(Tensor& dst, const Tensor& src)> copy;
  std::function<void()> sync;
};

// Collective over the world. Throws Error naming the group, op, size,
// element index, expected and actual value at the first mismatch.
// dev null: host buffers (the CPU communicators).
GroupCheckReport check_process_groups(const ProcessGroups& pg, const std::vector<int64_t>& sizes,
                                      const CheckDevice* dev = nullptr);

}  // namespace tripod::parallel
