// Context parallelism (Megatron's --context-parallel-size, Liu et al. 2023
// "Ring Attention"; Transformer Engine's p2p ring): the cp ranks of one
// model replica each hold 1/cp of every sequence, every layer runs on those
// rows only, and the attention core passes K/V blocks around the cp ring.
//
// NOTE [Load-balanced chunks]
// A sequence of T tokens is cut into 2*cp chunks of c = T / (2*cp); cp rank r
// holds chunks r and 2*cp-1-r, in that order, as its T/cp local rows
// (Megatron's get_batch_on_this_cp_rank). Under the causal mask every rank
// then has the same work: an early chunk (little to attend to) and a late
// one (much). Local row t sits at position
//   r*c + t                    for t < c
//   (2*cp-1-r)*c + (t - c)     for t >= c
// which RoPE and the learned position embedding use; at cp 1 it is t.
//
// NOTE [Ring schedule]
// Step i of cp (i = 0 .. cp-1) computes this rank's queries against the K/V
// of cp rank s = (r - i) mod cp, received from rank r-1 at the step before
// (rank r sends its block to r+1). The next block's send and receive are
// posted before the block in hand is computed, so the transfer overlaps the
// attention. Which query and K/V rows of a pair meet under the causal mask,
// with both sides in the load-balanced layout (rows [0, c) = the early
// chunk, [c, 2c) = the late one):
//   i = 0 (s = r):  all queries vs all K/V, causal (the local sequence's own
//                   causal mask: early-early diagonal, late-early full,
//                   early-late skipped, late-late diagonal)
//   s < r:          all queries vs the early K/V chunk s, full (chunk s
//                   precedes both of ours; chunk 2cp-1-s follows both)
//   s > r:          the late queries (chunk 2cp-1-r) vs all K/V, full (both
//                   of s's chunks precede it; our early chunk r precedes both)
// Partial outputs merge by their log-sum-exp (attention_block_forward with
// accumulate). The backward walks the same ring: K/V go round again, and
// each block's dK/dV accumulator travels with it, one hop behind: rank r
// adds its block's dK/dV (computed into scratch while the accumulator is
// in flight) and sends it on; after cp hops it is back at its owner.
//
// Relates to: backend/ops.h (the block attention ops), model/transformer_layer.cpp
// (the attention half that calls RingAttention), train/batch_source.h (the
// chunks each cp rank reads), docs/parallelism.md.
// Reference: Megatron-LM megatron/core/utils.py get_batch_on_this_cp_rank;
// Transformer Engine AttnFuncWithCPAndKVP2P.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "comm/communicator.h"

namespace tripod::model {

// Message tags of the ring on the cp group.
constexpr int kCpKvTag = 0x4350;   // K/V blocks, rank r -> r+1
constexpr int kCpDkvTag = 0x4351;  // dK/dV accumulators, rank r -> r+1

// NOTE [Load-balanced chunks]: this rank's rows of a sequence.
struct CpChunks {
  int cp_size = 1, cp_rank = 0;
  int64_t seq_length = 0;  // the whole sequence T

  int64_t chunk() const { return seq_length / (2 * cp_size); }
  int64_t local_length() const { return seq_length / cp_size; }
  // Position in the sequence of local row t.
  int64_t position(int64_t t) const {
    const int64_t c = chunk();
    return t < c ? cp_rank * c + t : (2 * cp_size - 1 - cp_rank) * c + (t - c);
  }
  // The first position of this rank's half h (0: early chunk, 1: late chunk).
  int64_t half_start(int h) const { return (h == 0 ? cp_rank : 2 * cp_size - 1 - cp_rank) * chunk(); }
};

// Refuses a sequence length the chunks do not divide, naming the flags.
void check_context_parallel_seq_length(int64_t seq_length, int cp_size);

// NOTE [Ring schedule]: the block of step `step` on cp rank `rank` for T_local rows.
backend::AttentionBlock ring_block(int rank, int size, int step, int64_t local_length);

// The K/V ring of one attention core. Buffers are the caller's (the stage's
// workspace), each kv(B, T_local, 2*G_tp*HS): kv[2] the block in hand and
// the one arriving; dkv[2] and dkv_block for the backward.
struct RingBuffers {
  Tensor kv[2], dkv[2], dkv_block;
};

class RingAttention {
 public:
  RingAttention(comm::Communicator& cp, backend::Backend& be, int n_head, int n_kv_head)
      : cp_(&cp), be_(&be), n_head_(n_head), n_kv_head_(n_kv_head) {}

  // out(B,T_local,NH_tp*HS) and lse(B,NH_tp,T_local) of the local queries
  // against the whole sequence's keys (causal), as attention_forward on
  // the whole sequence gives them for these rows.
  void forward(Tensor& out, Tensor& lse, const Tensor& qkv, RingBuffers& buf) const;
  // dqkv (overwritten) from dout, the stored qkv and the forward's out/lse.
  void backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                RingBuffers& buf) const;
  // Testing aid: appends "block STEP" when a block's attention is launched
  // (the schedule test interleaves it with a recording communicator's posts).
  void set_trace(std::vector<std::string>* trace) { trace_ = trace; }

 private:
  void note(const char* what, int step) const {
    if (trace_) trace_->push_back(std::string(what) + " " + std::to_string(step));
  }
  std::vector<std::string>* trace_ = nullptr;
  comm::Communicator* cp_;
  backend::Backend* be_;
  int n_head_, n_kv_head_;
};

}  // namespace tripod::model
