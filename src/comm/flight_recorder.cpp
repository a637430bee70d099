// Implementation of comm/flight_recorder.h.
#include "comm/flight_recorder.h"

#include <fmt/format.h>

namespace tripod::comm {

const char* op_state_name(OpState s) {
  switch (s) {
    case OpState::Queued: return "queued";
    case OpState::Started: return "started";
    case OpState::Completed: return "completed";
    case OpState::Failed: return "FAILED";
  }
  return "?";
}

FlightRecorder::FlightRecorder(size_t capacity)
    : capacity_(capacity ? capacity : 1), t0_(std::chrono::steady_clock::now()) {}

double FlightRecorder::now_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

uint64_t FlightRecorder::record(const std::string& group, uint64_t group_seq, const std::string& op,
                                size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  FlightEntry e;
  e.id = next_id_++;
  e.group_seq = group_seq;
  e.op = op;
  e.group = group;
  e.bytes = bytes;
  e.start_s = now_s();
  if (ring_.size() < capacity_) ring_.push_back(std::move(e));
  else ring_[(e.id - 1) % capacity_] = std::move(e);
  return next_id_ - 1;
}

FlightEntry* FlightRecorder::find(uint64_t id) {
  if (id == 0 || ring_.empty()) return nullptr;
  FlightEntry& e = ring_[(id - 1) % capacity_];
  return e.id == id ? &e : nullptr;
}

void FlightRecorder::started(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto* e = find(id)) {
    e->state = OpState::Started;
    e->start_s = now_s();
  }
}

void FlightRecorder::finished(uint64_t id, bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto* e = find(id)) {
    e->state = ok ? OpState::Completed : OpState::Failed;
    e->duration_s = now_s() - e->start_s;
  }
}

std::vector<FlightEntry> FlightRecorder::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<FlightEntry> out;
  if (ring_.size() < capacity_) return ring_;
  const size_t start = (next_id_ - 1) % capacity_;  // oldest slot
  for (size_t i = 0; i < capacity_; ++i) out.push_back(ring_[(start + i) % capacity_]);
  return out;
}

std::string FlightRecorder::dump() const {
  std::string s = fmt::format("{:>6} {:>8} {:<16} {:<14} {:>12} {:<10} {:>10} {:>10}\n", "id",
                              "grp_seq", "group", "op", "bytes", "state", "start_s", "dur_s");
  s.pop_back();  // entries start with their own newline
  for (const auto& e : entries()) {
    s += fmt::format("\n{:>6} {:>8} {:<16} {:<14} {:>12} {:<10} {:>10.3f} {:>10}", e.id,
                     e.group_seq, e.group, e.op, e.bytes, op_state_name(e.state), e.start_s,
                     e.duration_s < 0 ? std::string("-") : fmt::format("{:.3f}", e.duration_s));
  }
  return s;
}

}  // namespace tripod::comm
