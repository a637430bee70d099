// Which members of a group never reached a collective: used on a timeout by
// the Gloo and NCCL communicators, so the error names the rank that never
// arrived (the question PyTorch's flight recorder answers after the fact).
//
// Every member that times out in collective #seq writes
// "timeout/<seq>/<group rank>" into the group's store namespace, then waits
// (up to min(timeout, 5 s)) for the others; the members that never write are
// named.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/context.h"

namespace tripod::comm {

std::string name_missing_ranks(Store& group_store, const GroupSpec& spec, uint64_t seq,
                               const std::string& op, Millis timeout);

}  // namespace tripod::comm
