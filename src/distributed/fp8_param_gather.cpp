#include "distributed/fp8_param_gather.h"

#include <algorithm>

#include "base/error.h"

namespace tripod::distributed {
namespace {

void all_reduce_max(comm::Communicator* group, Tensor& t) {
  if (!group || group->size() == 1) return;
  comm::AllReduceOptions o;
  o.op = comm::ReduceOp::Max;
  group->all_reduce(t, o)->wait();
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
  const size_t nb = buffer_.buckets().size();
  codes_.resize(nb);
  send_.resize(nb);
  std::vector<bool> has(nb, false);
  for (const Weight& w : weights_) {
    TRIPOD_CHECK(w.meta && w.meta->dtype == DType::E4M3, "FP8 weight {}: needs an E4M3 weight meta",
                 buffer_.params().params()[w.param].spec.name);
    has[static_cast<size_t>(buffer_.bucket_of(w.param))] = true;
  }
  for (size_t b = nb; b-- > 0;)  // forward order: the last bucket holds the first layers
    if (has[b]) {
      const int64_t piece = buffer_.piece_len(b), n = buffer_.bucket_group(b).size();
      codes_[b] = be_.empty({piece * n}, DType::E4M3);
      send_[b] = be_.empty({piece}, DType::E4M3);
      be_.zero(codes_[b]);
      be_.zero(send_[b]);
      buckets_.push_back(b);
    }
}

void Fp8ParamGather::gather(const Tensor& value_shard) {
  const auto& params = buffer_.params().params();
  const float fp8_max = tripod::fp8_max(DType::E4M3);
  for (size_t b : buckets_) {
    const BucketRange& r = buffer_.buckets()[b];
    comm::Communicator& group = buffer_.bucket_group(b);
    const int64_t plen = buffer_.piece_len(b), piece = r.begin + group.rank() * plen;
    // Each weight of the bucket: [lo, hi) of it in this rank's piece (maybe empty).
    struct Part {
      const Weight* w;
      int64_t lo, hi;
    };
    std::vector<Part> parts;
    for (const Weight& w : weights_) {
      if (static_cast<size_t>(buffer_.bucket_of(w.param)) != b) continue;
      const model::Param& p = params[w.param];
      const int64_t lo = std::max(p.offset, piece), hi = std::min(p.offset + shape_numel(p.shape), piece + plen);
      parts.push_back({&w, lo, std::max(lo, hi)});
    }
    auto shard_part = [&](const Part& q) {
      return value_shard.flat(buffer_.shard_offset(b) + q.lo - piece, {q.hi - q.lo});
    };
    auto send_part = [&](const Part& q) { return send_[b].flat(q.lo - piece, {q.hi - q.lo}); };
    if (!config_.delayed()) {
      // Current scaling: the whole weight's amax, from every rank's part
      // (over the shard group) and every tp rank's shard of it (over tp).
      for (const Part& q : parts) {
        model::Fp8TensorMeta& m = *q.w->meta;
        be_.zero(m.amax);
        if (q.hi > q.lo) {
          Tensor out = send_part(q);
          be_.fp8_quantize(out, m.amax, shard_part(q), m.scale);  // codes discarded
        }
        all_reduce_max(&group, m.amax);
        all_reduce_max(tp_, m.amax);
        be_.fp8_update_scale(m.scale, m.scale_inv, nullptr, m.amax, fp8_max, config_.margin, false);
      }
    }
    for (const Part& q : parts) {
      if (q.hi == q.lo) continue;
      Tensor out = send_part(q);  // the amax accumulates (delayed: this iteration's)
      be_.fp8_quantize(out, q.w->meta->amax, shard_part(q), q.w->meta->scale);
    }
    group.all_gather(codes_[b], send_[b])->wait();
  }
}

Tensor Fp8ParamGather::codes(size_t k) const {
  const model::Param& p = buffer_.params().params()[weights_[k].param];
  const size_t b = static_cast<size_t>(buffer_.bucket_of(weights_[k].param));
  return codes_[b].flat(p.offset - buffer_.buckets()[b].begin, p.shape);
}

}  // namespace tripod::distributed
