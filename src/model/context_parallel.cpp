// Implementation of model/context_parallel.h (NOTE [Ring schedule]).
#include "model/context_parallel.h"

#include <memory>
#include <utility>

#include "base/error.h"

namespace tripod::model {

void check_context_parallel_seq_length(int64_t seq_length, int cp_size) {
  if (cp_size <= 1) return;
  TRIPOD_CHECK_HINT(seq_length % (2 * cp_size) == 0,
                    fmt::format("choose --seq-length a multiple of 2 x --context-parallel-size = {} (e.g. {})",
                                2 * cp_size, (seq_length / (2 * cp_size) + 1) * 2 * cp_size),
                    "--seq-length {} does not split into 2 x --context-parallel-size {} = {} equal chunks "
                    "(each context-parallel rank holds two of them, NOTE [Load-balanced chunks])",
                    seq_length, cp_size, 2 * cp_size);
}

backend::AttentionBlock ring_block(int rank, int size, int step, int64_t local_length) {
  const int src = ((rank - step) % size + size) % size;
  const int64_t c = local_length / 2;
  if (step == 0) return {0, local_length, 0, local_length, true};
  if (src < rank) return {0, local_length, 0, c, false};  // K/V's early chunk precedes both of ours
  return {c, c, 0, local_length, false};                  // both K/V chunks precede our late chunk
}

namespace {

struct Ring {
  comm::Communicator& cp;
  int next, prev;
  explicit Ring(comm::Communicator& c)
      : cp(c), next((c.rank() + 1) % c.size()), prev((c.rank() + c.size() - 1) % c.size()) {}
  // Posts the receive of the next block and the send of the one in hand.
  // Even ranks send first, odd ranks receive first: a communicator that
  // runs its point-to-point ops in order on one stream (NCCL) would
  // otherwise have every rank wait in its receive for a send queued behind
  // the neighbour's receive. Either order is the same data.
  std::pair<std::shared_ptr<comm::Work>, std::shared_ptr<comm::Work>> pass(const Tensor& send, Tensor& recv,
                                                                           int tag) const {
    std::shared_ptr<comm::Work> s, r;
    if (cp.rank() % 2 == 0) {
      s = cp.send(send, next, {tag});
      r = cp.recv(recv, prev, {tag});
    } else {
      r = cp.recv(recv, prev, {tag});
      s = cp.send(send, next, {tag});
    }
    return {std::move(s), std::move(r)};
  }
};

void wait(std::pair<std::shared_ptr<comm::Work>, std::shared_ptr<comm::Work>>& w) {
  if (w.first) w.first->wait();
  if (w.second) w.second->wait();
  w = {};
}

}  // namespace

void RingAttention::forward(Tensor& out, Tensor& lse, const Tensor& qkv, RingBuffers& buf) const {
  backend::Backend& be = *be_;
  const Ring ring(*cp_);
  const int P = cp_->size(), r = cp_->rank();
  const int64_t Tl = qkv.size(1);
  int cur = 0;
  be.attention_kv_copy(buf.kv[cur], qkv, n_head_, n_kv_head_);
  for (int i = 0; i < P; ++i) {
    std::pair<std::shared_ptr<comm::Work>, std::shared_ptr<comm::Work>> kv_pass;
    if (i + 1 < P) {
      be.synchronize();  // the block in hand is written before it is sent
      kv_pass = ring.pass(buf.kv[cur], buf.kv[1 - cur], kCpKvTag);
      if (!overlap_) wait(kv_pass);
    }
    note("block", i);
    be.attention_block_forward(out, lse, qkv, buf.kv[cur], n_head_, n_kv_head_, ring_block(r, P, i, Tl), i > 0);
    wait(kv_pass);
    cur = 1 - cur;
  }
}

void RingAttention::backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                             const Tensor& lse, RingBuffers& buf) const {
  backend::Backend& be = *be_;
  const Ring ring(*cp_);
  const int P = cp_->size(), r = cp_->rank();
  const int64_t Tl = qkv.size(1);
  be.zero(dqkv);  // Q columns accumulate over the blocks; K/V columns are written at the end
  int cur = 0, acc = 0;
  be.attention_kv_copy(buf.kv[cur], qkv, n_head_, n_kv_head_);
  std::pair<std::shared_ptr<comm::Work>, std::shared_ptr<comm::Work>> dkv_pass;
  for (int i = 0; i < P; ++i) {
    std::pair<std::shared_ptr<comm::Work>, std::shared_ptr<comm::Work>> kv_pass;
    if (i + 1 < P) {
      be.synchronize();
      kv_pass = ring.pass(buf.kv[cur], buf.kv[1 - cur], kCpKvTag);
      if (!overlap_) wait(kv_pass);
    }
    const backend::AttentionBlock blk = ring_block(r, P, i, Tl);
    note("block backward", i);
    if (i == 0) {  // this rank's own block starts its accumulator
      be.zero(buf.dkv[acc]);
      be.attention_block_backward(dqkv, buf.dkv[acc], dout, qkv, buf.kv[cur], out, lse, n_head_, n_kv_head_, blk);
    } else {  // computed while the accumulator of this block is still arriving
      be.zero(buf.dkv_block);
      be.attention_block_backward(dqkv, buf.dkv_block, dout, qkv, buf.kv[cur], out, lse, n_head_, n_kv_head_, blk);
      wait(dkv_pass);  // the accumulator arrived in dkv[acc]; the previous one has left
      be.add(buf.dkv[acc], buf.dkv[acc], buf.dkv_block);
    }
    // On to the rank that holds this block next (after the last step: its owner).
    be.synchronize();
    dkv_pass = ring.pass(buf.dkv[acc], buf.dkv[1 - acc], kCpDkvTag);
    if (!overlap_) wait(dkv_pass);
    acc = 1 - acc;
    wait(kv_pass);
    cur = 1 - cur;
  }
  wait(dkv_pass);  // dkv[acc] is this rank's own K/V gradient, summed over every rank's queries
  be.attention_kv_copy(dqkv, buf.dkv[acc], n_head_, n_kv_head_);
}

}  // namespace tripod::model
