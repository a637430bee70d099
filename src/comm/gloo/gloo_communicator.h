// GlooCommunicator: the CPU communicator, over Gloo's TCP transport
// (Debian libgloo-dev). One per group; its members connect in a full mesh
// through the group's store namespace.
//
// Relates to: comm/communicator.h (contract), comm/context.h (creates it),
// comm/flight_recorder.h. Reference: PyTorch ProcessGroupGloo (worker
// thread for collectives, p2p posted from the caller's thread).
//
// NOTE [Gloo async]
// Collectives run in call order on one worker thread per communicator, so
// Work is really asynchronous (DP can overlap bucket reductions with the
// backward pass). Each runs under Gloo's own timeout; wait() rethrows its
// error as TimeoutError / Error naming the global rank, group, op, size and
// elapsed time, and a timeout prints the flight recorder plus which members
// never reached the collective (found through the store). send/recv are
// posted immediately in the caller's thread (so send_forward and
// recv_backward can both be in flight); their wait() waits on Gloo directly,
// and is_completed() turns true only after wait().
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/context.h"

namespace tripod::comm {

// Collective over the group's members (the store is the group's namespace).
std::shared_ptr<Communicator> make_gloo_communicator(const GroupSpec& spec,
                                                     std::shared_ptr<Store> store,
                                                     const CommConfig& config);

}  // namespace tripod::comm
