// The all-to-all and all-gather attention of context parallelism
// (model/context_parallel.h: NOTE [Head all-to-all], NOTE [K/V all-gather]).
#include <algorithm>
#include <memory>
#include <optional>

#include "base/error.h"
#include "model/context_parallel.h"

namespace tripod::model {

std::vector<config::CpCommType> cp_comm_types_from_flag(const std::vector<std::string>& names, int64_t num_layers) {
  TRIPOD_CHECK_HINT(names.size() == 1 || static_cast<int64_t>(names.size()) == num_layers,
                    "give --cp-comm-type one value for every layer, or one per layer",
                    "--cp-comm-type has {} values for --num-layers {}", names.size(), num_layers);
  std::vector<config::CpCommType> types;
  for (const std::string& n : names) {
    TRIPOD_CHECK_HINT(n != "a2a+p2p",
                      "use --cp-comm-type a2a (all-to-all within the context-parallel group) or p2p (the ring)",
                      "--cp-comm-type a2a+p2p (hierarchical: all-to-all within a node, a ring across nodes, "
                      "--hierarchical-context-parallel-sizes) is not yet in tripod");
    const std::optional<config::CpCommType> t = config::cp_comm_type_from_name(n);
    TRIPOD_CHECK_HINT(t.has_value(), "use p2p, all_gather or a2a", "unknown --cp-comm-type '{}'", n);
    types.push_back(*t);
  }
  if (types.size() > 1 && std::all_of(types.begin(), types.end(), [&](config::CpCommType t) { return t == types[0]; }))
    return {types[0]};
  return types;
}

void check_context_parallel_heads(int64_t n_head, int64_t n_query_groups, int tp_size, int cp_size) {
  if (cp_size <= 1) return;
  const int64_t nh = n_head / tp_size, g = n_query_groups / tp_size;
  TRIPOD_CHECK_HINT(nh % cp_size == 0 && g % cp_size == 0,
                    "use --cp-comm-type p2p (the K/V ring works for any head count), or a "
                    "--context-parallel-size that divides both",
                    "--cp-comm-type a2a splits the heads of each tensor-parallel rank over the context-parallel "
                    "group: {} query heads and {} K/V heads per rank (--num-attention-heads {}, "
                    "--num-query-groups {}, / --tensor-model-parallel-size {}) are not both multiples of "
                    "--context-parallel-size {}",
                    nh, g, n_head, n_query_groups, tp_size, cp_size);
}

std::vector<std::vector<int32_t>> HeadExchange::host_maps(const CpChunks& chunks, int64_t B,
                                                          const std::vector<int64_t>& sections) {
  const int64_t P = chunks.cp_size, T = chunks.seq_length, Tl = chunks.local_length(), c = chunks.chunk();
  int64_t H = 0;
  for (int64_t n : sections) H += n;
  const int64_t Hp = H / P;
  // Head j of the head split's Hp on rank d <-> head h of the H.
  std::vector<int64_t> head_of(static_cast<size_t>(P * Hp));  // (d, j) -> h
  std::vector<int64_t> dest(static_cast<size_t>(H)), slot(static_cast<size_t>(H));  // h -> (d, j)
  int64_t off = 0, acc = 0;
  for (int64_t n : sections) {
    const int64_t per = n / P;
    for (int64_t d = 0; d < P; ++d)
      for (int64_t i = 0; i < per; ++i) {
        const int64_t h = off + d * per + i;
        head_of[static_cast<size_t>(d * Hp + acc + i)] = h;
        dest[static_cast<size_t>(h)] = d;
        slot[static_cast<size_t>(h)] = acc + i;
      }
    off += n;
    acc += per;
  }
  const size_t rows = static_cast<size_t>(B * Tl * H);
  std::vector<std::vector<int32_t>> m(4, std::vector<int32_t>(rows));
  auto i32 = [](int64_t v) { return static_cast<int32_t>(v); };
  for (int64_t d = 0; d < P; ++d) {
    const CpChunks of_d{chunks.cp_size, static_cast<int>(d), T};
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < Tl; ++t)
        for (int64_t j = 0; j < Hp; ++j) {
          const size_t at = static_cast<size_t>(((d * B + b) * Tl + t) * Hp + j);
          // to heads, pack: rank d's heads of the local row t
          m[0][at] = i32((b * Tl + t) * H + head_of[static_cast<size_t>(d * Hp + j)]);
          // to the sequence, pack: rank d's row t (position of_d(t)) of the local heads
          m[2][at] = i32((b * T + of_d.position(t)) * Hp + j);
        }
  }
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t pos = 0; pos < T; ++pos) {  // to heads, unpack: from the rank that holds the position
      const int64_t q = pos / c, s = q < P ? q : 2 * P - 1 - q, t = (q < P ? 0 : c) + pos % c;
      for (int64_t j = 0; j < Hp; ++j)
        m[1][static_cast<size_t>((b * T + pos) * Hp + j)] = i32(((s * B + b) * Tl + t) * Hp + j);
    }
    for (int64_t t = 0; t < Tl; ++t)  // to the sequence, unpack: head h from the rank that ran it
      for (int64_t h = 0; h < H; ++h)
        m[3][static_cast<size_t>((b * Tl + t) * H + h)] =
            i32(((dest[static_cast<size_t>(h)] * B + b) * Tl + t) * Hp + slot[static_cast<size_t>(h)]);
  }
  return m;
}

HeadExchange HeadExchange::make(backend::Backend& be, const CpChunks& chunks, int64_t B,
                                const std::vector<int64_t>& sections) {
  const std::vector<std::vector<int32_t>> m = host_maps(chunks, B, sections);
  HeadExchange x;
  x.rows = static_cast<int64_t>(m[0].size());
  TRIPOD_CHECK(x.rows < (int64_t(1) << 31), "--cp-comm-type a2a: {} head rows per micro-batch exceed the 32-bit "
               "row maps; lower --micro-batch-size", x.rows);
  Tensor* dst[4] = {&x.to_heads_pack, &x.to_heads_unpack, &x.to_seq_pack, &x.to_seq_unpack};
  for (int k = 0; k < 4; ++k) {
    Tensor host = Tensor::empty({x.rows}, DType::I32);
    std::copy(m[static_cast<size_t>(k)].begin(), m[static_cast<size_t>(k)].end(), host.data<int32_t>());
    *dst[k] = be.empty({x.rows}, DType::I32);
    be.copy(*dst[k], host);
  }
  be.synchronize();
  return x;
}

// src -> dst through pack, the all-to-all and unpack (rows of HS elements);
// dst may be src (in place: src is read by the pack before the unpack writes).
void UlyssesAttention::exchange(Tensor& dst, const Tensor& src, const Tensor& pack, const Tensor& unpack,
                                A2aBuffers& buf) const {
  backend::Backend& be = *be_;
  const int P = cp_->size(), r = cp_->rank();
  const int64_t n = src.numel(), rows = pack.numel(), hs = n / rows, chunk = n / P;
  Tensor send = buf.send.flat(0, {rows, hs}), recv = buf.recv.flat(0, {rows, hs});
  be.gather_rows(send, src.view({rows, hs}), pack);
  Tensor own = recv.flat(r * chunk, {chunk});
  be.copy(own, send.flat(r * chunk, {chunk}));  // the all-to-all does not copy a rank's own chunk
  be.synchronize();
  Tensor send_flat = send.view({n}), recv_flat = recv.view({n});
  const std::vector<int64_t> counts(static_cast<size_t>(P), chunk);
  cp_->all_to_all_v(recv_flat, send_flat, counts, counts)->wait();
  Tensor out = dst.view({rows, hs});
  be.gather_rows(out, recv, unpack);
}

void UlyssesAttention::forward(Tensor& out, Tensor& lse, Tensor& qkv, bool qkv_local, A2aBuffers& buf) const {
  const int P = cp_->size();
  const int64_t B = qkv.size(0), T = qkv.size(1) * P, nq = n_head_ / P, ng = n_kv_head_ / P;
  if (qkv_local) exchange(qkv, qkv, buf.qkv.to_heads_pack, buf.qkv.to_heads_unpack, buf);
  const Tensor qkv_h = qkv.view({B, T, qkv.size(2) / P});
  Tensor lse_h = lse.view({B, nq, T});
  be_->attention_forward(buf.att_h, lse_h, qkv_h, static_cast<int>(nq), static_cast<int>(ng));
  exchange(out, buf.att_h, buf.out.to_seq_pack, buf.out.to_seq_unpack, buf);
}

void UlyssesAttention::backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                const Tensor& lse, A2aBuffers& buf) const {
  const int P = cp_->size();
  const int64_t B = qkv.size(0), T = qkv.size(1) * P, nq = n_head_ / P, ng = n_kv_head_ / P;
  exchange(buf.att_h, out, buf.out.to_heads_pack, buf.out.to_heads_unpack, buf);
  exchange(buf.datt_h, dout, buf.out.to_heads_pack, buf.out.to_heads_unpack, buf);
  const Tensor qkv_h = qkv.view({B, T, qkv.size(2) / P});
  Tensor dqkv_h = dqkv.view({B, T, qkv.size(2) / P});  // written, then exchanged in place
  be_->attention_backward(dqkv_h, buf.datt_h, qkv_h, buf.att_h, lse.view({B, nq, T}), static_cast<int>(nq),
                          static_cast<int>(ng));
  exchange(dqkv, dqkv_h, buf.qkv.to_seq_pack, buf.qkv.to_seq_unpack, buf);
}

// ---- NOTE [K/V all-gather] ----

void AllGatherAttention::gather_kv(const Tensor& qkv, AllGatherBuffers& buf) const {
  be_->attention_kv_copy(buf.kv, qkv, n_head_, n_kv_head_);
  be_->synchronize();
  cp_->all_gather(buf.kv_all, buf.kv)->wait();
}

void AllGatherAttention::forward(Tensor& out, Tensor& lse, const Tensor& qkv, AllGatherBuffers& buf) const {
  const int P = cp_->size(), r = cp_->rank();
  const int64_t Tl = qkv.size(1), n = buf.kv.numel();
  gather_kv(qkv, buf);
  for (int i = 0; i < P; ++i) {  // the ring's order of blocks, so the merge sums as the ring does
    const int s = ((r - i) % P + P) % P;
    const Tensor kv = buf.kv_all.flat(s * n, buf.kv.shape());
    be_->attention_block_forward(out, lse, qkv, kv, n_head_, n_kv_head_, ring_block(r, P, i, Tl), i > 0);
  }
}

void AllGatherAttention::backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                  const Tensor& lse, AllGatherBuffers& buf) const {
  backend::Backend& be = *be_;
  const int P = cp_->size(), r = cp_->rank();
  const int64_t Tl = qkv.size(1), n = buf.kv.numel();
  gather_kv(qkv, buf);
  be.zero(dqkv);
  be.zero(buf.dkv_all);
  for (int i = 0; i < P; ++i) {
    const int s = ((r - i) % P + P) % P;
    const Tensor kv = buf.kv_all.flat(s * n, buf.kv.shape());
    Tensor dkv = buf.dkv_all.flat(s * n, buf.kv.shape());
    be.attention_block_backward(dqkv, dkv, dout, qkv, kv, out, lse, n_head_, n_kv_head_, ring_block(r, P, i, Tl));
  }
  be.synchronize();
  cp_->reduce_scatter(buf.dkv, buf.dkv_all)->wait();  // block s's dK/dV summed over every rank's queries, on s
  be.attention_kv_copy(dqkv, buf.dkv, n_head_, n_kv_head_);
}

}  // namespace tripod::model
