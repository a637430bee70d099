// Implementation of distributed/param_and_grad_buffer.h.
#include "distributed/param_and_grad_buffer.h"

#include <algorithm>

#include "base/error.h"

namespace tripod::distributed {
namespace {
// Backend::copy takes its destination by reference; views are temporaries.
void copy_to(backend::Backend& be, Tensor dst, const Tensor& src) { be.copy(dst, src); }
}  // namespace

std::vector<BucketRange> split_buckets(const std::vector<int64_t>& offsets, const std::vector<int64_t>& numels,
                                       int64_t padded_numel, int64_t bucket_size, const std::vector<bool>& alone) {
  const int n = static_cast<int>(offsets.size());
  TRIPOD_CHECK(n > 0 && numels.size() == offsets.size() && alone.size() == offsets.size(),
               "split_buckets: {} offsets, {} sizes, {} flags", offsets.size(), numels.size(), alone.size());
  TRIPOD_CHECK(offsets[0] == 0 && offsets.back() + numels.back() <= padded_numel,
               "split_buckets: parameters must start at 0 and end within the buffer");
  std::vector<BucketRange> out;
  int64_t end = padded_numel;  // the open bucket is [offsets[i], end), parameters [i, hi)
  int hi = n;
  auto close = [&](int lo) {
    out.push_back({offsets[static_cast<size_t>(lo)], end, lo, hi});
    end = offsets[static_cast<size_t>(lo)];
    hi = lo;
  };
  for (int i = n - 1; i >= 0; --i) {
    const size_t k = static_cast<size_t>(i);
    if (alone[k] && hi != i + 1) close(i + 1);  // the open bucket ends before a lone parameter
    if (alone[k] || (bucket_size > 0 && end - offsets[k] >= bucket_size)) close(i);
  }
  if (hi > 0) close(0);
  return out;
}

int64_t default_bucket_size(int dp_size) { return std::max<int64_t>(40000000, 1000000 * int64_t{dp_size}); }

ParamAndGradBuffer::ParamAndGradBuffer(model::ParamStore& params, comm::Communicator& dp, backend::Backend& be,
                                       int64_t bucket_size, bool distributed_optimizer, const std::vector<bool>& deferred)
    : params_(params), dp_(dp), be_(be), distributed_(distributed_optimizer), dp_size_(dp.size()),
      dp_rank_(dp.rank()) {
  const auto& ps = params_.params();
  std::vector<int64_t> offsets, numels;
  for (const auto& p : ps) {
    offsets.push_back(p.offset);
    numels.push_back(shape_numel(p.shape));
  }
  buckets_ = split_buckets(offsets, numels, params_.padded_numel(), bucket_size, deferred);
  bucket_of_.assign(ps.size(), -1);
  const int D = distributed_ ? dp_size_ : 1;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const BucketRange& r = buckets_[b];
    for (int i = r.first_param; i < r.end_param; ++i) bucket_of_[static_cast<size_t>(i)] = static_cast<int>(b);
    const int64_t padded = (r.numel() + D - 1) / D * D;
    piece_len_.push_back(padded / D);
    shard_offset_.push_back(distributed_ ? shard_numel_ : r.begin);  // else the shard is the buffer
    shard_numel_ += padded / D;
    Tensor staging;
    if (padded != r.numel()) {
      staging = be_.empty({padded}, DType::F32);
      be_.zero(staging);  // the tail stays zero: copies fill [0, numel) only
    }
    staging_.push_back(staging);
    deferred_.push_back(r.end_param - r.first_param == 1 && deferred[static_cast<size_t>(r.first_param)]);
  }
  if (distributed_) grad_shard_ = be_.empty({shard_numel_}, DType::F32);
  pending_.assign(buckets_.size(), 0);
  grad_work_.resize(buckets_.size());
  gather_work_.resize(buckets_.size());
  reset();
}

ParamAndGradBuffer::~ParamAndGradBuffer() {
  // Outstanding collectives write into buffers about to be freed: let them
  // end (an aborted group ends them with an error, ignored here).
  for (auto* works : {&grad_work_, &gather_work_})
    for (auto& w : *works)
      if (w) try { w->wait(); } catch (...) {}
}

std::vector<optim::Segment> ParamAndGradBuffer::shard_segments(const std::function<bool(const model::Param&)>& keep,
                                                        bool decay_flags) const {
  std::vector<optim::Segment> segs;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const BucketRange& r = buckets_[b];
    const int64_t rank = distributed_ ? dp_rank_ : 0;
    const int64_t piece = r.begin + rank * piece_len_[b];
    for (int i = r.first_param; i < r.end_param; ++i) {
      const model::Param& p = params_.params()[static_cast<size_t>(i)];
      const int64_t lo = std::max(p.offset, piece);
      const int64_t hi = std::min(p.offset + shape_numel(p.shape), piece + piece_len_[b]);
      if (lo < hi && keep(p)) segs.push_back({shard_offset_[b] + lo - piece, hi - lo, !decay_flags || p.spec.weight_decay});
    }
  }
  // Buckets come in reverse buffer order; without the distributed optimizer
  // the "shard" is the buffer itself, so sort before merging.
  std::sort(segs.begin(), segs.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
  return optim::merge_segments(std::move(segs));
}

void ParamAndGradBuffer::take_shard(Tensor& shard, const Tensor& full) const {
  if (!distributed_) {
    be_.copy(shard, full);
    return;
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const BucketRange& r = buckets_[b];
    const int64_t piece = r.begin + dp_rank_ * piece_len_[b];
    const int64_t real = std::clamp<int64_t>(r.end - piece, 0, piece_len_[b]);  // beyond: padding
    if (real > 0) copy_to(be_, shard.flat(shard_offset_[b], {real}), full.flat(piece, {real}));
  }
}

Tensor ParamAndGradBuffer::input_of(size_t b, const Tensor& full) {
  const BucketRange& r = buckets_[b];
  if (!staging_[b].defined()) return full.flat(r.begin, {r.numel()});
  copy_to(be_, staging_[b].flat(0, {r.numel()}), full.flat(r.begin, {r.numel()}));
  return staging_[b];
}

void ParamAndGradBuffer::gather_shards(Tensor& full, const Tensor& shard) {
  if (!distributed_) {
    be_.copy(full, shard);
    return;
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const BucketRange& r = buckets_[b];
    Tensor out = staging_[b].defined() ? staging_[b] : full.flat(r.begin, {r.numel()});
    dp_.all_gather(out, shard.flat(shard_offset_[b], {piece_len_[b]}))->wait();
    if (staging_[b].defined()) copy_to(be_, full.flat(r.begin, {r.numel()}), staging_[b].flat(0, {r.numel()}));
  }
}

void ParamAndGradBuffer::reset() {
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].end_param - buckets_[b].first_param;
  param_ready_.assign(params_.params().size(), false);
}

void ParamAndGradBuffer::register_grad_ready(const std::vector<size_t>& params) {
  for (size_t i : params) {
    TRIPOD_CHECK(i < param_ready_.size(), "register_grad_ready: parameter {} of {}", i, param_ready_.size());
    if (param_ready_[i]) continue;
    param_ready_[i] = true;
    const size_t b = static_cast<size_t>(bucket_of_[i]);
    if (--pending_[b] == 0 && !deferred_[b]) launch(b);
  }
}

void ParamAndGradBuffer::launch(size_t b) {
  TRIPOD_CHECK(!grad_work_[b], "bucket {} launched twice in one iteration", b);
  wait_gather(b);  // its staging buffer may still be the previous all-gather's output
  if (on_launch) on_launch(static_cast<int>(b));
  Tensor& grads = params_.grads();
  if (!distributed_) {
    Tensor view = grads.flat(buckets_[b].begin, {buckets_[b].numel()});
    grad_work_[b] = dp_.all_reduce(view);
  } else {
    Tensor out = grad_shard_.flat(shard_offset_[b], {piece_len_[b]});
    grad_work_[b] = dp_.reduce_scatter(out, input_of(b, grads));
  }
}

void ParamAndGradBuffer::start_grad_sync() {
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (!grad_work_[b]) launch(b);
}

void ParamAndGradBuffer::finish_grad_sync() {
  for (auto& w : grad_work_)
    if (w) {
      w->wait();
      w.reset();
    }
}

bool ParamAndGradBuffer::all_grads_ready() const {
  return std::all_of(pending_.begin(), pending_.end(), [](int n) { return n == 0; });
}

Tensor& ParamAndGradBuffer::reduced_grads() { return distributed_ ? grad_shard_ : params_.grads(); }

void ParamAndGradBuffer::start_param_sync(const Tensor& value_shard) {
  TRIPOD_CHECK(distributed_, "the parameter all-gather needs the distributed optimizer");
  finish_param_sync();
  for (size_t k = buckets_.size(); k-- > 0;) {  // forward order: the first layers first
    const BucketRange& r = buckets_[k];
    Tensor out = staging_[k].defined() ? staging_[k] : params_.values().flat(r.begin, {r.numel()});
    gather_work_[k] = dp_.all_gather(out, value_shard.flat(shard_offset_[k], {piece_len_[k]}));
  }
}

void ParamAndGradBuffer::wait_gather(size_t b) {
  if (!gather_work_[b]) return;
  gather_work_[b]->wait();
  gather_work_[b].reset();
  const BucketRange& r = buckets_[b];
  if (staging_[b].defined())
    copy_to(be_, params_.values().flat(r.begin, {r.numel()}), staging_[b].flat(0, {r.numel()}));
  params_.sync_compute(r.begin, r.numel());
}

void ParamAndGradBuffer::finish_param_sync(const std::vector<size_t>& params) {
  for (size_t i : params) wait_gather(static_cast<size_t>(bucket_of_[i]));
}

void ParamAndGradBuffer::finish_param_sync() {
  for (size_t b = 0; b < buckets_.size(); ++b) wait_gather(b);
}

bool ParamAndGradBuffer::param_sync_pending() const {
  return std::any_of(gather_work_.begin(), gather_work_.end(), [](const auto& w) { return w != nullptr; });
}

}  // namespace tripod::distributed
