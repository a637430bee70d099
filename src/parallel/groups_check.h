// A self-test of a job's process groups: every collective on every group of
// the layout, checked against analytically known values (sums of ranks,
// gathered rank ids). Used by `tripod bench comm --check` (so the real
// launchers can drive it) and by the threads-as-ranks unit tests.
//
// Relates to: parallel/groups.h, cli/bench.cpp, tests/comm/.
#pragma once

#include <cstdint>
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

// Collective over the world. Throws Error naming the group, op, size,
// element index, expected and actual value at the first mismatch.
GroupCheckReport check_process_groups(const ProcessGroups& pg, const std::vector<int64_t>& sizes);

}  // namespace tripod::parallel
