// IpcCommunicator: collectives for the ranks of a group that share one
// memory (CPU ranks on one host; GPU ranks that share one GPU, as when a
// cluster layout is rehearsed on one GPU), through buffers the ranks map
// from each other instead of a transport. CPU groups use it by default, GPU
// groups with TRIPOD_IPC_COLLECTIVES=1 (docs/debugging.md); a group whose
// members do not share one memory keeps its usual communicator, and every
// group sends ops above the mailbox limit (IpcDevice::mailbox_limit) there.
//
// NOTE [IPC collectives]
// Each member owns a mailbox (a buffer the others map) and, per slot s % 2,
// a "ready" and a "done" event; a control block in shared memory holds each
// member's last posted ready / done sequence number. Op s on member m:
//  1. wait (host) until every peer posted done >= s - 1 and make the compute
//     stream wait for their done events: nobody still reads m's mailbox;
//  2. copy the input into m's mailbox (queued on the compute stream);
//     record ready[s % 2], post ready = s;
//  3. wait (host) until every peer posted ready >= s, make the stream wait
//     for their ready events;
//  4. compute the output from the mailboxes (all-reduce: every member
//     reduces all of them in member order, so all get the same bits);
//     record done[s % 2], post done = s.
// The host waits only for its peers' host progress (the futex on their
// words), never for the device; the device orders itself through the
// events. Two slots suffice: a peer can re-record an event only after this
// member has passed the step that waits for it. A mailbox grows (all
// members at the same op, as sizes agree) after a device synchronisation.
// The host waits are bounded by the communicator's timeout and end when a
// member aborts, a peer's process has exited, or a peer posted another op or
// size for the same sequence number (each member posts what it calls before
// it waits, so both sides see a mismatch). send/recv and all_to_all_v go to
// the fallback communicator.
//
// Relates to: comm/ipc/ipc_device.h (CPU / CUDA memory and events),
// comm/ipc/shared_memory.h, comm/context.cpp (make_device_communicator).
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/context.h"
#include "comm/ipc/ipc_device.h"

namespace tripod::comm {

// Collective over the group's members. Returns `fallback` when the members
// do not all report the same IpcDevice::location() (or the group has more
// than 64 members).
std::shared_ptr<Communicator> make_ipc_communicator(const GroupSpec& spec, std::shared_ptr<Store> store,
                                                    const CommConfig& config, std::shared_ptr<Communicator> fallback,
                                                    std::shared_ptr<IpcDevice> device);
// Whether `comm` was made by make_ipc_communicator (tests, logs).
bool is_ipc_communicator(const Communicator& comm);

}  // namespace tripod::comm
