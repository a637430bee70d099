// Megatron's interleaved 1F1B schedule over virtual pipeline stages, as
// forward_backward_pipelining_with_interleaving.
//
// Relates to: parallel/pp_schedule.h (driver, contract), parallel/p2p.h
// (wrap-around links), docs/pipeline.md (the P=2, m=4, v=2 timeline).
// Reference: Narayanan et al. 2021, section 2.2.2 and figure 4 (bottom).
//
// NOTE [Interleaved order]
// Each pp rank holds v model chunks; chunk c of rank r is virtual stage
// c*P + r, so activations go round the ring v times (rank P-1's chunk c
// feeds rank 0's chunk c+1). A rank runs v*m forward "iterations" k; they
// visit micro-batches in groups of P per chunk:
//   group      g = k / (P*v)
//   chunk      c = (k % (P*v)) / P           (forward)
//              c = v - 1 - (k % (P*v)) / P   (backward: last chunk first)
//   micro-batch  = g*P + k % P
// (Megatron's get_model_chunk_id / get_microbatch_id_in_model_chunk). Hence
// m % P == 0. Warm-up is (P - r - 1)*2 + (v - 1)*P forwards (all of them when
// m == P, as Megatron does), then steady forward k+W / backward k pairs with
// one combined communication, then the remaining backwards. As in 1F1B
// every receive is for this rank's next forward / backward in its own order
// (on rank 0 the input arriving from rank P-1 during forward k is for
// forward k+1, which is what Megatron's "k - (P-1)" bookkeeping computes).
#include <algorithm>

#include "parallel/pp_schedule.h"

namespace tripod::parallel::detail {

namespace {

struct Interleaving {
  int P, v;
  int chunk(int k, bool forward) const {
    const int c = (k % (P * v)) / P;
    return forward ? c : v - 1 - c;
  }
  int microbatch(int k) const { return (k / (P * v)) * P + k % P; }
  MbChunk fwd(int k) const { return {microbatch(k), chunk(k, true)}; }
  MbChunk bwd(int k) const { return {microbatch(k), chunk(k, false)}; }
};

}  // namespace

void run_interleaved(ScheduleDriver& d, const ScheduleConfig& cfg) {
  const Interleaving il{cfg.pp_size, cfg.num_chunks};
  const int P = cfg.pp_size, r = cfg.pp_rank, v = cfg.num_chunks;
  const int total = cfg.num_microbatches * v;
  const bool all_warmup = cfg.forward_only || cfg.num_microbatches == P;
  const int warmup = all_warmup ? total : std::min((P - r - 1) * 2 + (v - 1) * P, total);
  const int steady = total - warmup;
  auto next_fwd = [&](int k) { return k + 1 < total ? il.fwd(k + 1) : MbChunk{}; };
  auto next_bwd = [&](int k) { return k + 1 < total ? il.bwd(k + 1) : MbChunk{}; };

  d.recv_forward(il.fwd(0));
  for (int k = 0; k < warmup; ++k) {
    d.forward(il.fwd(k));
    if (k == warmup - 1 && !all_warmup)
      // The first backward's gradient arrives together with the last warm-up send.
      d.communicate(il.fwd(k), {}, next_fwd(k), il.bwd(0));
    else
      d.send_forward_recv_forward(il.fwd(k), next_fwd(k));
  }
  for (int k = 0; k < steady; ++k) {
    const int fk = warmup + k;
    d.forward(il.fwd(fk));
    d.backward(il.bwd(k));
    d.communicate(il.fwd(fk), il.bwd(k), next_fwd(fk), next_bwd(k));
  }
  if (cfg.forward_only) return;
  if (all_warmup) d.recv_backward(il.bwd(0));
  for (int k = steady; k < total; ++k) {
    d.backward(il.bwd(k));
    d.send_backward_recv_backward(il.bwd(k), next_bwd(k));
  }
}

}  // namespace tripod::parallel::detail
