// ZeRO-3's parameter values without whole buffers (distributed/
// param_and_grad_buffer.h): the start-up's initial values and a load's values
// written into this rank's shard one parameter at a time, and the whole
// values made again for a save or an evaluation that needs them.
#include "distributed/param_and_grad_buffer.h"

#include <algorithm>

#include "base/error.h"

namespace tripod::distributed {

// NOTE [Sharded init]: ZeRO-3 without whole value buffers. Each parameter's
// initial value (the same counter-based draw as ParamStore::init, so the
// same numbers) is made on the host one parameter at a time, and this
// rank keeps the part that falls in its pieces: start-up holds one
// parameter, not the model.
void ParamAndGradBuffer::init_shard(uint64_t seed, float std, int64_t num_layers) {
  TRIPOD_CHECK(shard_params_ && !params_.has_flat_values(), "init_shard: ZeRO-3 without flat values only");
  fill_shard(value_shard_, [&](const model::Param& p) { return params_.initial_value(p, seed, std, num_layers); });
}

// NOTE [Streamed shard load]: a load under ZeRO (the Adam moments; under
// ZeRO-3 the parameters too) holds one parameter's tp-local value on the
// host at a time, never the whole model (init_shard is the same walk with
// the initial values).
void ParamAndGradBuffer::fill_shard(Tensor& shard, const std::function<Tensor(const model::Param&)>& local_value) {
  const auto& ps = params_.params();
  if (!distributed_) {  // the shard is the whole buffer
    for (const model::Param& p : ps) {
      const Tensor value = local_value(p);
      Tensor dst = shard.flat(p.offset, {shape_numel(p.shape)});
      be_.copy(dst, value.flat(0, {shape_numel(p.shape)}));
      be_.synchronize();
    }
    return;
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const BucketRange& r = buckets_[b];
    const int64_t piece = r.begin + rank_of(b) * piece_len_[b];
    for (int i = r.first_param; i < r.end_param; ++i) {
      const model::Param& p = ps[static_cast<size_t>(i)];
      const int64_t lo = std::max(p.offset, piece);
      const int64_t hi = std::min(p.offset + shape_numel(p.shape), piece + piece_len_[b]);
      if (lo >= hi) continue;
      const Tensor value = local_value(p);
      Tensor dst = shard.flat(shard_offset_[b] + lo - piece, {hi - lo});
      be_.copy(dst, value.flat(lo - p.offset, {hi - lo}));
      be_.synchronize();  // the host tensor goes out of scope
    }
  }
}

void ParamAndGradBuffer::materialize_params() {
  if (skips_params_) {  // NOTE [FP8 parameter all-gather]: the skipped values, whole again
    finish_param_sync();
    Tensor shard = be_.empty({shard_numel_}, DType::F32);
    take_shard(shard, params_.values());
    gather_shards(params_.values(), shard);
    return;
  }
  if (!shard_params_ || params_.has_flat_values()) return;
  for (size_t b = 0; b < buckets_.size(); ++b) release_params(b);
  params_.allocate_flat(true, false);
  gather_shards(params_.values(), value_shard_);
  params_.sync_compute();
}

void ParamAndGradBuffer::unmaterialize_params(bool take_back) {
  if (!shard_params_ || !params_.has_flat_values()) return;
  if (take_back) take_shard(value_shard_, params_.values());
  params_.release_flat(true, false);
}

}  // namespace tripod::distributed
