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
#include <functional>
#include <memory>
#include <string>

#include "comm/context.h"

namespace tripod::comm {

std::string name_missing_ranks(Store& group_store, const GroupSpec& spec, uint64_t seq,
                               const std::string& op, Millis timeout);

// After a connection of the group failed (a peer closed or reset it): every
// member that sees the failure writes "failed/<group rank>" and waits up to
// `wait` for the others; the members that never write are named as the
// likely dead ones. When the store itself is unreachable, says so (under a
// hand launch the store lives in global rank 0).
// `after_report` runs once this member has reported (e.g. closing the group's
// connections, so that members still waiting on this one fail and report too).
std::string name_dead_ranks(Store& group_store, const GroupSpec& spec, Millis wait,
                            const std::function<void()>& after_report = {});

}  // namespace tripod::comm
