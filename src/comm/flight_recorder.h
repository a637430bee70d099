// Flight recorder: a small ring buffer of this process's recent collectives
// (sequence number, op, group, bytes, state, start time), printed when a
// collective times out so the log shows which collective each rank was in,
// as PyTorch's NCCL flight recorder does.
//
// Relates to: comm/gloo/gloo_communicator.cpp, comm/nccl/nccl_communicator.cpp
// (they record), comm/context.h (owns one per process).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace tripod::comm {

enum class OpState { Queued, Started, Completed, Failed };
const char* op_state_name(OpState s);

struct FlightEntry {
  uint64_t id = 0;         // process-wide sequence number
  uint64_t group_seq = 0;  // sequence number within the group
  std::string op, group;
  size_t bytes = 0;
  OpState state = OpState::Queued;
  double start_s = 0;      // seconds since the recorder was created
  double duration_s = -1;  // -1 while not finished
};

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity = 64);
  // Returns the entry id to pass to the updates below.
  uint64_t record(const std::string& group, uint64_t group_seq, const std::string& op, size_t bytes);
  void started(uint64_t id);
  void finished(uint64_t id, bool ok);
  std::vector<FlightEntry> entries() const;  // oldest first
  std::string dump() const;                  // a table, one line per entry

 private:
  FlightEntry* find(uint64_t id);
  double now_s() const;
  mutable std::mutex mu_;
  std::vector<FlightEntry> ring_;
  size_t capacity_;
  uint64_t next_id_ = 1;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace tripod::comm
