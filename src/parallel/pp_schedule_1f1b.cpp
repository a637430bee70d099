// 1F1B without interleaving (PipeDream-Flush), as Megatron's
// forward_backward_pipelining_without_interleaving.
//
// Relates to: parallel/pp_schedule.h (driver, contract), parallel/p2p.h,
// docs/pipeline.md (the P=4, m=8 timeline).
// Reference: Narayanan et al. 2021, section 2.2.1 and figure 4 (top).
//
// NOTE [1F1B phases]
// pp rank r of P runs, for m micro-batches:
//   warm-up   W = min(P - r - 1, m) forwards, so that the last stage can
//             start its first backward as early as possible;
//   steady    m - W rounds of one forward then one backward (of the oldest
//             micro-batch still held);
//   cool-down the W backwards left.
// At most W + 1 <= P micro-batches of activations are alive on a rank (the
// first stage holds the most), which is 1F1B's memory advantage over GPipe
// (m). Every receive is for this rank's next forward (or backward) in its own
// order, and each neighbour sends in the same micro-batch order, so the
// (peer, tag) streams of parallel/p2p.h match up.
#include <algorithm>

#include "parallel/pp_schedule.h"

namespace tripod::parallel::detail {

void run_1f1b(ScheduleDriver& d, const ScheduleConfig& cfg) {
  const int P = cfg.pp_size, r = cfg.pp_rank, M = cfg.num_microbatches;
  // Evaluation has no backward to wait for: every micro-batch is "warm-up".
  const int warmup = cfg.forward_only ? M : std::min(P - r - 1, M);
  const int steady = M - warmup;
  auto mb = [](int m) { return MbChunk{m, 0}; };

  for (int i = 0; i < warmup; ++i) {
    d.recv_forward(mb(i));
    d.forward(mb(i));
    d.send_forward(mb(i));
  }
  if (steady > 0) d.recv_forward(mb(warmup));
  for (int i = 0; i < steady; ++i) {
    const int fwd = warmup + i;  // micro-batch forwarded now; backward is micro-batch i
    const bool last = i == steady - 1;
    d.forward(mb(fwd));
    d.send_forward_recv_backward(mb(fwd), mb(i));
    d.backward(mb(i));
    if (last)
      d.send_backward(mb(i));
    else
      d.send_backward_recv_forward(mb(i), mb(fwd + 1));
  }
  if (cfg.forward_only) return;
  for (int i = steady; i < M; ++i) {
    d.recv_backward(mb(i));
    d.backward(mb(i));
    d.send_backward(mb(i));
  }
}

}  // namespace tripod::parallel::detail
