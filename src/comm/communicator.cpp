// The default Communicator::all_to_all_v (comm/communicator.h): a pairwise
// exchange over send/recv, so every implementation (Gloo, NCCL, staged,
// timed, local) has it; one with a native all-to-all may override it.
#include "comm/communicator.h"

#include <fmt/format.h>

#include <utility>

#include "base/error.h"

namespace tripod::comm {
namespace {

class DoneWork final : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

}  // namespace

void Communicator::all_to_all_offsets(const Tensor& out, const Tensor& in, const std::vector<int64_t>& send_counts,
                                      const std::vector<int64_t>& recv_counts, std::vector<int64_t>* send_at_out,
                                      std::vector<int64_t>* recv_at_out) const {
  const int n = size();
  TRIPOD_CHECK(static_cast<int>(send_counts.size()) == n && static_cast<int>(recv_counts.size()) == n,
               "all_to_all_v on group {}: {} send and {} receive counts for {} ranks", name(), send_counts.size(),
               recv_counts.size(), n);
  std::vector<int64_t> send_at(n + 1, 0), recv_at(n + 1, 0);
  for (int r = 0; r < n; ++r) {
    TRIPOD_CHECK(send_counts[r] >= 0 && recv_counts[r] >= 0, "all_to_all_v on group {}: a negative count", name());
    send_at[r + 1] = send_at[r] + send_counts[r];
    recv_at[r + 1] = recv_at[r] + recv_counts[r];
  }
  TRIPOD_CHECK(send_at[n] <= in.numel() && recv_at[n] <= out.numel(),
               "all_to_all_v on group {}: counts ({} to send, {} to receive) exceed in {} / out {}", name(), send_at[n],
               recv_at[n], in.str(), out.str());
  *send_at_out = std::move(send_at);
  *recv_at_out = std::move(recv_at);
}

std::shared_ptr<Work> Communicator::all_to_all_v(Tensor& out, const Tensor& in,
                                                 const std::vector<int64_t>& send_counts,
                                                 const std::vector<int64_t>& recv_counts, const AllToAllOptions& o) {
  const int n = size(), me = rank();
  std::vector<int64_t> send_at, recv_at;
  all_to_all_offsets(out, in, send_counts, recv_counts, &send_at, &recv_at);
  SendOptions so;
  so.tag = o.tag;
  so.timeout = o.timeout;
  RecvOptions ro;
  ro.tag = o.tag;
  ro.timeout = o.timeout;
  for (int s = 1; s < n; ++s) {  // step s: to rank + s, from rank - s
    const int dst = (me + s) % n, src = (me - s + n) % n;
    std::shared_ptr<Work> sw, rw;
    if (send_counts[dst] > 0) sw = send(in.flat(send_at[dst], {send_counts[dst]}), dst, so);
    Tensor chunk;
    if (recv_counts[src] > 0) {
      chunk = out.flat(recv_at[src], {recv_counts[src]});
      rw = recv(chunk, src, ro);
    }
    if (sw) sw->wait();
    if (rw) rw->wait();
  }
  return std::make_shared<DoneWork>();
}

}  // namespace tripod::comm
