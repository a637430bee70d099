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
// NOTE [Head all-to-all]
// --cp-comm-type a2a (DeepSpeed-Ulysses, Jacobs et al. 2023; Transformer
// Engine's AttnFuncWithCPAndQKVOA2A): an all-to-all over the cp group
// turns the sequence split into a head split. Before attention, cp rank d
// receives from every rank s the rows s holds (its two chunks) of d's
// 1/cp of the heads: NH_tp/cp query heads and G_tp/cp K/V heads, so NH_tp
// and G_tp must be multiples of cp (Transformer Engine asserts the same;
// no K/V head is replicated). The received rows are put in their true
// order, so the attention is the single process's attention_forward on
// the whole sequence for those heads, with the ordinary causal mask; its
// output goes back by the reverse all-to-all. Backward: out and dout go to
// the head split, attention_backward runs there, dqkv comes back.
// The exchanges move head rows (HS elements): a row gather packs what
// goes to each rank contiguously (rank-major), the all-to-all moves
// equal chunks, a second gather puts the received rows in place
// (backend gather_rows, with index maps built once per shape:
// HeadExchange). The layer keeps qkv in the head split after forward (the
// same number of elements), so backward does not exchange it again;
// selective recompute reruns the attention from it directly. Per rank and
// layer the all-to-alls move qkv + out forward and out + dout + dqkv
// backward, each T/cp rows of which (cp-1)/cp leave the rank: the bytes a
// rank sends fall as 1/cp (the ring sends cp-1 K/V blocks of T/cp rows,
// about T rows of K/V whatever cp).
//
// NOTE [K/V all-gather]
// --cp-comm-type all_gather (Transformer Engine's
// AttnFuncWithCPAndKVAllGather): every rank all-gathers the K/V of the
// whole sequence (cp blocks in rank order, each a rank's two chunks) and
// attends its local queries to each block as the ring does (ring_block's
// windows, merged by log-sum-exp), without overlap. Backward gathers K/V
// again, accumulates each block's dK/dV into its slot of a (cp x local)
// buffer and reduce-scatters it, so each rank gets its own K/V gradient.
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
#include "config/options.h"

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

// --cp-comm-type's values (one for every layer, or one per layer), refusing
// unknown ones and a2a+p2p with the fix.
std::vector<config::CpCommType> cp_comm_types_from_flag(const std::vector<std::string>& names, int64_t num_layers);

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
  // Benchmark aid (`tripod bench cp`): false waits for each pass before the
  // block's attention, the serialized baseline the overlap is measured
  // against. Same blocks, same order, same numbers.
  void set_overlap(bool on) { overlap_ = on; }

 private:
  void note(const char* what, int step) const {
    if (trace_) trace_->push_back(std::string(what) + " " + std::to_string(step));
  }
  std::vector<std::string>* trace_ = nullptr;
  bool overlap_ = true;
  comm::Communicator* cp_;
  backend::Backend* be_;
  int n_head_, n_kv_head_;
};

// NOTE [Head all-to-all]: the gathers of one exchange shape. A tensor
// (B, T_local, H heads) in the sequence split, H = the sum of `sections`
// (qkv: {NH_tp, G_tp, G_tp}; out: {NH_tp}), has the head split (B, T,
// H / cp heads): each section's heads [d*n/cp, (d+1)*n/cp) on cp rank d.
struct HeadExchange {
  // i32 row maps on the device (rows of HS elements), each B*T_local*H long.
  Tensor to_heads_pack, to_heads_unpack, to_seq_pack, to_seq_unpack;
  int64_t rows = 0;  // B * T_local * H

  static HeadExchange make(backend::Backend& be, const CpChunks& chunks, int64_t B,
                           const std::vector<int64_t>& sections);
  // The host maps, for tests: {to_heads_pack, to_heads_unpack, to_seq_pack, to_seq_unpack}.
  static std::vector<std::vector<int32_t>> host_maps(const CpChunks& chunks, int64_t B,
                                                     const std::vector<int64_t>& sections);
};

// Refuses head counts the cp group does not divide (--cp-comm-type a2a), naming the flags.
void check_context_parallel_heads(int64_t n_head, int64_t n_query_groups, int tp_size, int cp_size);

// The buffers of the a2a exchanges (the stage's workspace): send and recv
// of qkv's size, att_h and datt_h (B, T, NH_tp/cp*HS); the maps of qkv's
// and out's shapes.
struct A2aBuffers {
  Tensor send, recv, att_h, datt_h;
  HeadExchange qkv, out;
};

class UlyssesAttention {
 public:
  UlyssesAttention(comm::Communicator& cp, backend::Backend& be, int n_head, int n_kv_head)
      : cp_(&cp), be_(&be), n_head_(n_head), n_kv_head_(n_kv_head) {}

  // out(B,T_local,NH_tp*HS) as attention_forward on the whole sequence
  // gives them for the local rows. qkv (B,T_local,QKV_tp) holds the local
  // rows on entry when qkv_local (it is then exchanged in place), the head
  // split otherwise (recompute); it holds the head split on return. lse
  // (B*NH_tp*T_local elements) holds the head split's (B,NH_tp/cp,T).
  void forward(Tensor& out, Tensor& lse, Tensor& qkv, bool qkv_local, A2aBuffers& buf) const;
  // dqkv (local rows, overwritten) from dout and out (local rows), qkv and
  // lse as forward left them.
  void backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                A2aBuffers& buf) const;

 private:
  void exchange(Tensor& dst, const Tensor& src, const Tensor& pack, const Tensor& unpack, A2aBuffers& buf) const;
  comm::Communicator* cp_;
  backend::Backend* be_;
  int n_head_, n_kv_head_;
};

// NOTE [K/V all-gather]: kv_all and dkv_all (cp x B x T_local x 2*G_tp*HS),
// kv and dkv (one block).
struct AllGatherBuffers {
  Tensor kv, kv_all, dkv, dkv_all;
};

class AllGatherAttention {
 public:
  AllGatherAttention(comm::Communicator& cp, backend::Backend& be, int n_head, int n_kv_head)
      : cp_(&cp), be_(&be), n_head_(n_head), n_kv_head_(n_kv_head) {}
  // As RingAttention's.
  void forward(Tensor& out, Tensor& lse, const Tensor& qkv, AllGatherBuffers& buf) const;
  void backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                AllGatherBuffers& buf) const;

 private:
  void gather_kv(const Tensor& qkv, AllGatherBuffers& buf) const;
  comm::Communicator* cp_;
  backend::Backend* be_;
  int n_head_, n_kv_head_;
};

}  // namespace tripod::model
