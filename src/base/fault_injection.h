// Fault injection for the fault suite (tests/faults): TRIPOD_FAULT makes one
// rank die, hang, exit or abort just before a chosen training iteration (see
// DebugConfig::fault_kind). Does nothing when the variable is unset.
//
//   inject_rank_fault(global_rank, iteration_ + 1);   // top of the train loop
#pragma once

#include <cstdint>

namespace tripod {

void inject_rank_fault(int global_rank, int64_t iteration);

}  // namespace tripod
