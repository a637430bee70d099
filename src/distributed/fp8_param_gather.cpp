#include "distributed/fp8_param_gather.h"

#include <algorithm>

#include "base/error.h"

namespace tripod::distributed {
namespace {

void copy_to(backend::Backend& be, Tensor dst, const Tensor& src) { be.copy(dst, src); }

// The amax over a group (none, or alone: this rank's own).
void max_over(comm::Communicator* group, Tensor& t) {
  if (group && group->size() > 1) group->all_reduce(t, {comm::ReduceOp::Max})->wait();
}

}  // namespace

Fp8ParamGather::Fp8ParamGather(ParamAndGradBuffer& buffer, backend::Backend& be, const config::Fp8Config& config,
                               std::vector<Weight> weights, comm::Communicator* tp)
    : buffer_(buffer), be_(be), config_(config), weights_(std::move(weights)), tp_(tp) {
  TRIPOD_CHECK_HINT(buffer_.distributed(),
                    "add --use-distributed-optimizer (or --data-parallel-sharding-strategy optim, optim_grads or "
                    "optim_grads_params)",
                    "--fp8-param-gather needs the distributed optimizer (it gathers the optimizer's shards)");
  TRIPOD_CHECK_HINT(config_.enabled(), "add --fp8-format hybrid (or e4m3)",
                    "--fp8-param-gather needs FP8 GEMMs");
  const auto& params = buffer_.params().params();
  const size_t nb = buffer_.buckets().size();
  std::vector<bool> has(nb, false);
  for (const Weight& w : weights_) {
    TRIPOD_CHECK(w.meta && w.meta->dtype == DType::E4M3, "FP8 weight {}: needs an E4M3 weight meta",
                 params[w.param].spec.name);
    has[static_cast<size_t>(buffer_.bucket_of(w.param))] = true;
  }
  for (size_t b = nb; b-- > 0;) {  // forward order: the last bucket holds the first layers
    if (!has[b]) continue;
    const BucketRange& r = buffer_.buckets()[b];
    const int64_t plen = buffer_.piece_len(b);
    const int n = buffer_.bucket_group(b).size();
    Bucket g;
    g.index = b;
    g.runs.resize(static_cast<size_t>(n));
    for (int q = 0; q < n; ++q) {  // rank q's piece: the FP8 weights' elements in it, packed
      const int64_t piece = r.begin + q * plen;
      int64_t pos = 0;
      for (size_t k = 0; k < weights_.size(); ++k) {
        const size_t i = weights_[k].param;
        if (static_cast<size_t>(buffer_.bucket_of(i)) != b) continue;
        const int64_t lo = std::max(params[i].offset, piece);
        const int64_t hi = std::min(params[i].offset + shape_numel(params[i].shape), piece + plen);
        g.runs[static_cast<size_t>(q)].push_back({k, lo, std::max(lo, hi), pos});
        pos += std::max<int64_t>(0, hi - lo);
      }
      g.packed_len = std::max(g.packed_len, pos);
    }
    g.packed_len = std::max<int64_t>(g.packed_len, 1);  // every rank sends at least one byte
    for (size_t k = 0; k < weights_.size(); ++k)  // the bucket's FP8 weights, one after another
      if (static_cast<size_t>(buffer_.bucket_of(weights_[k].param)) == b) {
        g.weights.push_back(k);
        g.codes_offset.push_back(g.codes_len);  // 256-byte aligned: the FP8 GEMMs' operand alignment
        g.codes_len += (shape_numel(params[weights_[k].param].shape) + 255) / 256 * 256;
      }
    g.codes = be_.empty({g.codes_len}, DType::E4M3);
    be_.zero(g.codes);
    buckets_.push_back(std::move(g));
  }
}

void Fp8ParamGather::gather(const Tensor& value_shard) { run(&value_shard); }

void Fp8ParamGather::gather_from_values() { run(nullptr); }

void Fp8ParamGather::run(const Tensor* value_shard) {
  const auto& params = buffer_.params().params();
  const float fp8_max = tripod::fp8_max(DType::E4M3);
  for (Bucket& g : buckets_) {
    const size_t b = g.index;
    comm::Communicator& group = buffer_.bucket_group(b);
    const int64_t piece = buffer_.buckets()[b].begin + group.rank() * buffer_.piece_len(b);
    const auto& mine = g.runs[static_cast<size_t>(group.rank())];
    // This rank's part [lo, hi) of each weight of the bucket (maybe empty),
    // read from the master shard and cast to its packed place.
    auto shard_part = [&](const Run& q) {  // from the shard, or from this rank's pieces of values()
      return value_shard ? value_shard->flat(buffer_.shard_offset(b) + q.lo - piece, {q.hi - q.lo})
                         : buffer_.params().values().flat(q.lo, {q.hi - q.lo});
    };
    // The packed buffers live for this bucket's gather only.
    Tensor send = be_.empty({g.packed_len}, DType::E4M3), recv = be_.empty({g.packed_len * group.size()}, DType::E4M3);
    be_.zero(send);
    auto send_part = [&](const Run& q) { return send.flat(q.pos, {q.hi - q.lo}); };
    if (!config_.delayed()) {
      // Current scaling: the whole weight's amax, from every rank's part
      // (over the shard group) and every tp rank's shard of it (over tp).
      for (const Run& q : mine) {
        model::Fp8TensorMeta& m = *weights_[q.weight].meta;
        be_.zero(m.amax);
        if (q.hi > q.lo) {
          Tensor out = send_part(q);
          be_.fp8_quantize(out, m.amax, shard_part(q), m.scale);  // codes discarded
        }
        max_over(&group, m.amax);
        max_over(tp_, m.amax);
        be_.fp8_update_scale(m.scale, m.scale_inv, nullptr, m.amax, fp8_max, config_.margin, false);
      }
    }
    for (const Run& q : mine) {
      if (q.hi == q.lo) continue;
      Tensor out = send_part(q);  // the amax accumulates (delayed: this iteration's)
      be_.fp8_quantize(out, weights_[q.weight].meta->amax, shard_part(q), weights_[q.weight].meta->scale);
    }
    // The codes move as bytes (U8: every communicator moves those; NCCL has no FP8 type to name).
    Tensor recv8 = Tensor::wrap(recv.raw(), {recv.numel()}, DType::U8, recv.device());
    group.all_gather(recv8, Tensor::wrap(send.raw(), {send.numel()}, DType::U8, send.device()))->wait();
    // Every rank's packed parts to their places in the weights' codes.
    for (size_t r = 0; r < g.runs.size(); ++r)
      for (const Run& q : g.runs[r]) {
        if (q.hi == q.lo) continue;
        const size_t j = static_cast<size_t>(
            std::find(g.weights.begin(), g.weights.end(), q.weight) - g.weights.begin());
        const int64_t at = g.codes_offset[j] + q.lo - params[weights_[q.weight].param].offset;
        Tensor dst = g.codes.flat(at, {q.hi - q.lo});
        copy_to(be_, dst, recv.flat(static_cast<int64_t>(r) * g.packed_len + q.pos, {q.hi - q.lo}));
      }
  }
}

int64_t Fp8ParamGather::gathered_bytes() const {
  int64_t n = 0;
  for (const Bucket& g : buckets_) n += g.packed_len;
  return n;
}

int64_t Fp8ParamGather::buffer_bytes() const {
  int64_t n = 0;
  for (const Bucket& g : buckets_) n += static_cast<int64_t>(g.codes.nbytes());
  return n;
}

std::unique_ptr<Fp8ParamGather> make_fp8_param_gather(ParamAndGradBuffer& buffer, backend::Backend& be,
                                                      model::Fp8State& fp8, comm::Communicator* tp) {
  if (fp8.num_linears() == 0) return nullptr;  // a chunk of high-precision layers only
  const auto& params = buffer.params().params();
  std::vector<Fp8ParamGather::Weight> weights;
  std::vector<size_t> indices;
  for (int i = 0; i < fp8.num_linears(); ++i) {
    model::Fp8Linear& lin = fp8.linear(i);
    const size_t index = static_cast<size_t>(&lin.weight() - params.data());
    TRIPOD_CHECK(index < params.size(), "FP8 linear {}: its weight is not in this chunk's buffer", lin.name());
    weights.push_back({index, &lin.weight_meta()});
    indices.push_back(index);
  }
  auto g = std::make_unique<Fp8ParamGather>(buffer, be, fp8.config(), std::move(weights), tp);
  buffer.skip_in_param_sync(indices);
  for (int i = 0; i < fp8.num_linears(); ++i) fp8.linear(i).use_gathered_weight(g->codes(static_cast<size_t>(i)));
  return g;
}

Tensor Fp8ParamGather::codes(size_t k) const {
  const model::Param& p = buffer_.params().params()[weights_[k].param];
  for (const Bucket& g : buckets_)
    for (size_t j = 0; j < g.weights.size(); ++j)
      if (g.weights[j] == k) return g.codes.flat(g.codes_offset[j], p.shape);
  TRIPOD_CHECK(false, "FP8 weight {}: not in a gathered bucket", p.spec.name);
  return Tensor();
}

// ---- ParamAndGradBuffer: the f32 all-gather without the FP8 weights ----

void ParamAndGradBuffer::skip_in_param_sync(const std::vector<size_t>& skipped) {
  TRIPOD_CHECK(distributed_ && !shard_params_, "skipping parameters in the all-gather needs the distributed "
               "optimizer without sharded parameters");
  std::vector<bool> skip(params_.params().size(), false);
  for (size_t i : skipped) skip[i] = true;
  const size_t nb = buckets_.size();
  packed_runs_.assign(nb, {});
  packed_len_.assign(nb, 0);
  packed_send_.assign(nb, Tensor());
  packed_recv_.assign(nb, Tensor());
  const auto& ps = params_.params();
  for (size_t b = 0; b < nb; ++b) {
    const BucketRange& r = buckets_[b];
    bool any = false;
    for (int i = r.first_param; i < r.end_param; ++i) any = any || skip[static_cast<size_t>(i)];
    if (!any) continue;
    const int n = size_of(b);
    packed_runs_[b].resize(static_cast<size_t>(n));
    for (int q = 0; q < n; ++q) {
      const int64_t piece = r.begin + q * piece_len_[b], end = std::min(piece + piece_len_[b], r.end);
      auto& runs = packed_runs_[b][static_cast<size_t>(q)];
      int64_t total = 0;
      for (int i = r.first_param; i < r.end_param; ++i) {
        if (skip[static_cast<size_t>(i)]) continue;
        const model::Param& p = ps[static_cast<size_t>(i)];
        const int64_t lo = std::max(p.offset, piece), hi = std::min(p.offset + shape_numel(p.shape), end);
        if (hi <= lo) continue;
        if (!runs.empty() && runs.back().second == lo)
          runs.back().second = hi;
        else
          runs.emplace_back(lo, hi);
        total += hi - lo;
      }
      packed_len_[b] = std::max(packed_len_[b], total);
    }
    packed_len_[b] = std::max<int64_t>(packed_len_[b], 1);  // every rank sends at least one element
    // Packing holds a send and a receive buffer, 4 (n + 1) bytes per packed
    // element, for the gather; where the longest rank's part is over half
    // its piece (the embedding's bucket) the bytes saved do not pay for
    // them: that bucket's f32 gather stays whole, straight into values().
    if (2 * packed_len_[b] > piece_len_[b]) packed_runs_[b].clear();
  }
  skips_params_ = true;
}

void ParamAndGradBuffer::start_packed_sync(size_t b, const Tensor& value_shard) {
  const BucketRange& r = buckets_[b];
  const int me = rank_of(b);
  const int64_t piece = r.begin + me * piece_len_[b], own = std::min(piece_len_[b], r.end - piece);
  // This rank's piece of every parameter (the FP8 weights too: the next
  // step's take_shard reads the master weights from here).
  if (own > 0)
    copy_to(be_, params_.values().flat(piece, {own}), value_shard.flat(shard_offset_[b], {own}));
  packed_send_[b] = be_.empty({packed_len_[b]}, DType::F32);
  be_.zero(packed_send_[b]);
  packed_recv_[b] = be_.empty({packed_len_[b] * size_of(b)}, DType::F32);
  int64_t pos = 0;
  for (const auto& [lo, hi] : packed_runs_[b][static_cast<size_t>(me)]) {
    copy_to(be_, packed_send_[b].flat(pos, {hi - lo}), value_shard.flat(shard_offset_[b] + lo - piece, {hi - lo}));
    pos += hi - lo;
  }
  gather_work_[b] = comm_of(b).all_gather(packed_recv_[b], packed_send_[b]);
}

void ParamAndGradBuffer::finish_packed_sync(size_t b) {
  const int me = rank_of(b);
  for (int q = 0; q < size_of(b); ++q) {
    if (q == me) continue;
    int64_t pos = q * packed_len_[b];
    for (const auto& [lo, hi] : packed_runs_[b][static_cast<size_t>(q)]) {
      copy_to(be_, params_.values().flat(lo, {hi - lo}), packed_recv_[b].flat(pos, {hi - lo}));
      pos += hi - lo;
    }
  }
  packed_send_[b] = Tensor();
  packed_recv_[b] = Tensor();
}

}  // namespace tripod::distributed
