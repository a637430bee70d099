// Implementation of distributed/param_and_grad_buffer.h.
#include "distributed/param_and_grad_buffer.h"

#include <algorithm>

#include "base/error.h"

namespace tripod::distributed {
namespace {
// Backend::copy takes its destination by reference; views are temporaries.
void copy_to(backend::Backend& be, Tensor dst, const Tensor& src) { be.copy(dst, src); }

// NOTE [Compute-dtype all-gather]: the parameters the model reads through
// Param::value (fp32) rather than Param::compute under bf16/fp16.
bool reads_fp32_value(const model::ParamSpec& spec) {
  if (model::is_layernorm(spec)) return true;
  using R = model::ParamRole;
  return spec.role == R::RouterWeight || spec.role == R::RouterExpertBias || spec.role == R::SharedExpertGateWeight;
}

// [lo, hi) of a parameter (bucket-relative) within rank q's piece [q L, (q+1) L).
std::pair<int64_t, int64_t> in_piece(int64_t lo, int64_t hi, int64_t q, int64_t L) {
  return {std::max(lo, q * L), std::min(hi, (q + 1) * L)};
}
}  // namespace

std::vector<BucketRange> split_buckets(const std::vector<int64_t>& offsets, const std::vector<int64_t>& numels,
                                       int64_t padded_numel, int64_t bucket_size, const std::vector<bool>& alone,
                                       const std::vector<int>* group_of) {
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
    else if (group_of && i > 0 && (*group_of)[k - 1] != (*group_of)[k]) close(i);
  }
  if (hi > 0) close(0);
  return out;
}

int64_t default_bucket_size(int dp_size) { return std::max<int64_t>(40000000, 1000000 * int64_t{dp_size}); }

ParamAndGradBuffer::ParamAndGradBuffer(model::ParamStore& params, comm::Communicator& dp, backend::Backend& be,
                                       int64_t bucket_size, bool distributed_optimizer, const std::vector<bool>& deferred,
                                       bool shard_grads, bool shard_params, const std::vector<int>* group_of,
                                       comm::Communicator* expert_dp)
    : params_(params), dp_(dp), be_(be), distributed_(distributed_optimizer), shard_grads_(shard_grads),
      shard_params_(shard_params) {
  TRIPOD_CHECK(!shard_grads_ || distributed_, "sharded gradients need the distributed optimizer's shard layout");
  TRIPOD_CHECK(!shard_params_ || shard_grads_, "sharded parameters need sharded gradients");
  const auto& ps = params_.params();
  std::vector<int64_t> offsets, numels;
  for (const auto& p : ps) {
    offsets.push_back(p.offset);
    numels.push_back(shape_numel(p.shape));
    expert_.push_back(p.spec.expert >= 0);
  }
  // NOTE [Expert buckets]: with an expert group, a bucket holds experts only
  // or no expert at all (a run of either kind, within one group of group_of).
  std::vector<int> kind_of;
  if (expert_dp) {
    for (size_t i = 0; i < ps.size(); ++i) kind_of.push_back((group_of ? 2 * (*group_of)[i] : 0) + (expert_[i] ? 1 : 0));
    group_of = &kind_of;
  }
  buckets_ = split_buckets(offsets, numels, params_.padded_numel(), bucket_size, deferred, group_of);
  bucket_of_.assign(ps.size(), -1);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const BucketRange& r = buckets_[b];
    // NOTE [Expert buckets]: a bucket of experts is reduced over edp.
    comm_.push_back(expert_dp && expert_[static_cast<size_t>(r.first_param)] ? expert_dp : &dp_);
    const int D = distributed_ ? size_of(b) : 1;
    for (int i = r.first_param; i < r.end_param; ++i) bucket_of_[static_cast<size_t>(i)] = static_cast<int>(b);
    const int64_t padded = (r.numel() + D - 1) / D * D;
    piece_len_.push_back(padded / D);
    shard_offset_.push_back(distributed_ ? shard_numel_ : r.begin);  // else the shard is the buffer
    shard_numel_ += padded / D;
    Tensor staging;
    // ZeRO-2/-3 keep no staging copies (their buckets are padded buffers of
    // their own; the parameter all-gather takes one for its time only).
    if (padded != r.numel() && !shard_grads_) {
      staging = be_.empty({padded}, DType::F32);
      be_.zero(staging);  // the tail stays zero: copies fill [0, numel) only
    }
    staging_.push_back(staging);
    deferred_.push_back(r.end_param - r.first_param == 1 && deferred[static_cast<size_t>(r.first_param)]);
  }
  // ZeRO-2/-3: the whole gradient buffer goes before the shards are
  // allocated, so that start-up never holds it next to them (a model that
  // fits only sharded must also start sharded).
  if (shard_grads_) params_.release_flat(false, true);
  if (distributed_) grad_shard_ = be_.empty({shard_numel_}, DType::F32);
  pending_.assign(buckets_.size(), 0);
  grad_work_.resize(buckets_.size());
  gather_work_.resize(buckets_.size());
  const size_t n = buckets_.size();
  grad_bucket_.resize(n);
  rs_piece_.resize(n);
  comm_send_.resize(n);
  comm_recv_.resize(n);
  gathered_.resize(n);
  gathered_compute_.resize(n);
  z3_work_.resize(n);
  gather_compute_ = shard_params_ && params_.compute_dtype() != DType::F32;
  fp32_params_.resize(n);
  fp32_part_len_.assign(n, 0);
  z3_send_.resize(n);
  fp32_send_.resize(n);
  fp32_out_.resize(n);
  fp32_work_.resize(n);
  for (size_t b = 0; gather_compute_ && b < n; ++b) {
    const BucketRange& r = buckets_[b];
    for (int i = r.first_param; i < r.end_param; ++i)
      if (reads_fp32_value(ps[static_cast<size_t>(i)].spec)) fp32_params_[b].push_back(static_cast<size_t>(i));
    for (int64_t q = 0; q < size_of(b); ++q) {
      int64_t part = 0;
      for (size_t i : fp32_params_[b]) {
        const int64_t lo = ps[i].offset - r.begin;
        const auto [a, e] = in_piece(lo, lo + shape_numel(ps[i].shape), q, piece_len_[b]);
        part += std::max<int64_t>(e - a, 0);
      }
      fp32_part_len_[b] = std::max(fp32_part_len_[b], part);
    }
  }
  if (shard_params_) {  // the initialised (or loaded) values become the shard
    value_shard_ = be_.empty({shard_numel_}, DType::F32);
    be_.zero(value_shard_);
    if (params_.has_flat_values()) take_shard(value_shard_, params_.values());  // else init_shard() fills it
  }
  if (shard_grads_) {
    params_.release_flat(shard_params_, true);
    for (size_t b = 0; b < n; ++b)
      if (deferred_[b]) bind_grads(b);  // kept for the whole step
  }
  reset();
}

ParamAndGradBuffer::~ParamAndGradBuffer() {
  // Outstanding collectives write into buffers about to be freed: let them
  // end (an aborted group ends them with an error, ignored here).
  for (auto* works : {&grad_work_, &gather_work_, &z3_work_, &fp32_work_})
    for (auto& w : *works)
      if (w) try { w->wait(); } catch (...) {}
}

std::vector<optim::Segment> ParamAndGradBuffer::shard_segments(const std::function<bool(const model::Param&)>& keep,
                                                        bool decay_flags) const {
  std::vector<optim::Segment> segs;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const BucketRange& r = buckets_[b];
    const int64_t rank = distributed_ ? rank_of(b) : 0;
    const int64_t piece = r.begin + rank * piece_len_[b];
    for (int i = r.first_param; i < r.end_param; ++i) {
      const model::Param& p = params_.params()[static_cast<size_t>(i)];
      const int64_t lo = std::max(p.offset, piece);
      const int64_t hi = std::min(p.offset + shape_numel(p.shape), piece + piece_len_[b]);
      if (lo < hi && keep(p))
        segs.push_back({shard_offset_[b] + lo - piece, hi - lo, !decay_flags || p.spec.weight_decay,
                        decay_flags && model::is_embedding_or_output(p.spec)});
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
    const int64_t piece = r.begin + rank_of(b) * piece_len_[b];
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
    Tensor stage = staging_[b];
    if (!stage.defined() && piece_len_[b] * size_of(b) != r.numel())  // ZeRO-2/-3 keep no staging
      stage = be_.empty({piece_len_[b] * size_of(b)}, DType::F32);
    Tensor out = stage.defined() ? stage : full.flat(r.begin, {r.numel()});
    comm_of(b).all_gather(out, shard.flat(shard_offset_[b], {piece_len_[b]}))->wait();
    if (stage.defined()) copy_to(be_, full.flat(r.begin, {r.numel()}), stage.flat(0, {r.numel()}));
  }
}

void ParamAndGradBuffer::reset() {
  inter_reduced_ = false;
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].end_param - buckets_[b].first_param;
  param_ready_.assign(params_.params().size(), false);
  if (!shard_grads_) return;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (grad_work_[b]) finish_bucket_grad(b);
    if (deferred_[b]) {
      be_.zero(grad_bucket_[b]);
    } else if (grad_bucket_[b].defined()) {
      params_.bind_grads(buckets_[b].begin, buckets_[b].numel(), Tensor());
      grad_bucket_[b] = Tensor();
    }
  }
  be_.zero(grad_shard_);
}

void ParamAndGradBuffer::register_grad_ready(const std::vector<size_t>& params) {
  for (size_t i : params) {
    TRIPOD_CHECK(i < param_ready_.size(), "register_grad_ready: parameter {} of {}", i, param_ready_.size());
    if (param_ready_[i]) continue;
    param_ready_[i] = true;
    const size_t b = static_cast<size_t>(bucket_of_[i]);
    if (--pending_[b] > 0) continue;
    if (shard_grads_) {  // every micro-batch: pending again for the next one
      pending_[b] = buckets_[b].end_param - buckets_[b].first_param;
      for (int k = buckets_[b].first_param; k < buckets_[b].end_param; ++k) param_ready_[static_cast<size_t>(k)] = false;
    }
    if (!deferred_[b]) launch(b);
  }
}

void ParamAndGradBuffer::launch(size_t b) {
  TRIPOD_CHECK(!grad_work_[b], "bucket {} launched twice in one iteration", b);
  wait_gather(b);  // its staging buffer may still be the previous all-gather's output
  if (on_launch) on_launch(static_cast<int>(b));
  if (shard_grads_) {
    TRIPOD_CHECK(grad_bucket_[b].defined(), "bucket {}: gradients reported final but never bound", b);
    // One reduce-scatter in flight besides this one: the older ones end now
    // (they had this bucket's backward to run), freeing their full buffers.
    for (size_t k = 0; k < buckets_.size(); ++k)
      if (k != b && grad_work_[k]) finish_bucket_grad(k);
    if (comm_dtype_ != DType::F32) {
      comm_send_[b] = to_comm_dtype(grad_bucket_[b], grad_bucket_[b].numel());
      comm_recv_[b] = be_.empty({piece_len_[b]}, comm_dtype_);
      grad_work_[b] = comm_of(b).reduce_scatter(comm_recv_[b], comm_send_[b]);
      return;
    }
    rs_piece_[b] = be_.empty({piece_len_[b]}, DType::F32);
    grad_work_[b] = comm_of(b).reduce_scatter(rs_piece_[b], grad_bucket_[b]);
    return;
  }
  Tensor& grads = params_.grads();
  const BucketRange& r = buckets_[b];
  if (!distributed_) {
    Tensor view = grads.flat(r.begin, {r.numel()});
    if (comm_dtype_ != DType::F32) {
      comm_send_[b] = to_comm_dtype(view, r.numel());
      grad_work_[b] = comm_of(b).all_reduce(comm_send_[b]);
    } else {
      grad_work_[b] = comm_of(b).all_reduce(view);
    }
  } else {
    Tensor out = grad_shard_.flat(shard_offset_[b], {piece_len_[b]});
    if (comm_dtype_ != DType::F32) {
      comm_send_[b] = to_comm_dtype(grads.flat(r.begin, {r.numel()}), piece_len_[b] * size_of(b));
      comm_recv_[b] = be_.empty({piece_len_[b]}, comm_dtype_);
      grad_work_[b] = comm_of(b).reduce_scatter(comm_recv_[b], comm_send_[b]);
    } else {
      grad_work_[b] = comm_of(b).reduce_scatter(out, input_of(b, grads));
    }
  }
}

void ParamAndGradBuffer::set_grad_comm_dtype(DType dtype) {
  TRIPOD_CHECK_HINT(dtype == DType::F32 || dtype == DType::BF16, "reduce gradients in fp32 or bf16",
                    "gradients cannot be reduced in {}", dtype_name(dtype));
  for (const auto& w : grad_work_) TRIPOD_CHECK(!w, "the gradient communication dtype changed during a reduction");
  comm_dtype_ = dtype;
}

Tensor ParamAndGradBuffer::to_comm_dtype(const Tensor& f32, int64_t padded) {
  Tensor t = be_.empty({padded}, comm_dtype_);
  if (padded > f32.numel()) {
    Tensor tail = t.flat(f32.numel(), {padded - f32.numel()});
    be_.zero(tail);
  }
  Tensor head = t.flat(0, {f32.numel()});
  be_.cast(head, f32);
  return t;
}

void ParamAndGradBuffer::finish_unsharded_grad(size_t b) {
  grad_work_[b]->wait();
  grad_work_[b].reset();
  if (comm_dtype_ == DType::F32 || !comm_send_[b].defined()) return;
  const BucketRange& r = buckets_[b];
  if (distributed_) {
    Tensor out = grad_shard_.flat(shard_offset_[b], {piece_len_[b]});
    be_.cast(out, comm_recv_[b]);
  } else {
    Tensor view = params_.grads().flat(r.begin, {r.numel()});
    be_.cast(view, comm_send_[b]);  // the all-reduce was in place
  }
  comm_send_[b] = Tensor();
  comm_recv_[b] = Tensor();
}

void ParamAndGradBuffer::start_grad_sync() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (shard_grads_) {  // the others went per micro-batch
      TRIPOD_CHECK(deferred_[b] || !grad_bucket_[b].defined() || grad_work_[b],
                   "bucket {}: the backward did not report every parameter's gradient as final", b);
      if (deferred_[b]) launch(b);
    } else if (!grad_work_[b]) {
      launch(b);
    }
  }
}

void ParamAndGradBuffer::finish_grad_sync() {
  for (size_t b = 0; b < grad_work_.size(); ++b) {
    if (!grad_work_[b]) continue;
    if (shard_grads_) finish_bucket_grad(b);
    else finish_unsharded_grad(b);
  }
  // Each instance reduced its own ranks' gradients into the shard: the sum
  // over the instances makes it the whole dp group's (the same shard
  // position in every instance: inter_ holds exactly those ranks).
  if (inter_ && inter_->size() > 1 && distributed_ && !inter_reduced_) {
    inter_->all_reduce(grad_shard_)->wait();
    inter_reduced_ = true;
  }
}

// ---- sharded gradients ----

void ParamAndGradBuffer::bind_grads(size_t b) {
  if (grad_work_[b]) finish_bucket_grad(b);
  if (grad_bucket_[b].defined()) return;
  const BucketRange& r = buckets_[b];
  grad_bucket_[b] = be_.empty({piece_len_[b] * size_of(b)}, DType::F32);  // padded: no staging copy
  be_.zero(grad_bucket_[b]);
  params_.bind_grads(r.begin, r.numel(), grad_bucket_[b].flat(0, {r.numel()}));
}

void ParamAndGradBuffer::finish_bucket_grad(size_t b) {
  grad_work_[b]->wait();
  grad_work_[b].reset();
  Tensor piece = grad_shard_.flat(shard_offset_[b], {piece_len_[b]});
  if (comm_dtype_ != DType::F32) {  // NOTE [bf16 gradient communication]
    rs_piece_[b] = be_.empty({piece_len_[b]}, DType::F32);
    be_.cast(rs_piece_[b], comm_recv_[b]);
    comm_send_[b] = Tensor();
    comm_recv_[b] = Tensor();
  }
  be_.add(piece, piece, rs_piece_[b]);  // NOTE [Sharded gradients]: the shard accumulates
  rs_piece_[b] = Tensor();
  if (deferred_[b]) return;
  params_.bind_grads(buckets_[b].begin, buckets_[b].numel(), Tensor());
  grad_bucket_[b] = Tensor();
}

int64_t ParamAndGradBuffer::bound_grad_numel() const {
  int64_t n = 0;
  for (const Tensor& t : grad_bucket_) n += t.defined() ? t.numel() : 0;
  return n;
}

// ---- sharded parameters ----

void ParamAndGradBuffer::start_gather(size_t b) {
  if (gathered_[b].defined()) return;  // gathered or in flight
  const int64_t L = piece_len_[b];
  const Tensor mine = value_shard_.flat(shard_offset_[b], {L});
  if (!gather_compute_) {
    gathered_[b] = be_.empty({L * size_of(b)}, DType::F32);
    z3_work_[b] = comm_of(b).all_gather(gathered_[b], mine);
    if (on_gather) on_gather(static_cast<int>(b), 0);
    return;
  }
  // NOTE [Compute-dtype all-gather]: this rank's piece cast, then gathered.
  z3_send_[b] = be_.empty({L}, params_.compute_dtype());
  be_.cast(z3_send_[b], mine);
  gathered_compute_[b] = be_.empty({L * size_of(b)}, params_.compute_dtype());
  z3_work_[b] = comm_of(b).all_gather(gathered_compute_[b], z3_send_[b]);
  // The fp32 parameters: this rank's parts of them, packed in parameter order.
  int64_t packed = 0;
  for (size_t i : fp32_params_[b]) packed += shape_numel(params_.params()[i].shape);
  gathered_[b] = be_.empty({std::max<int64_t>(packed, 1)}, DType::F32);
  const int64_t S = fp32_part_len_[b];
  if (S > 0) {
    fp32_send_[b] = be_.empty({S}, DType::F32);
    be_.zero(fp32_send_[b]);
    int64_t pos = 0;
    for (size_t i : fp32_params_[b]) {
      const model::Param& p = params_.params()[i];
      const int64_t lo = p.offset - buckets_[b].begin;
      const auto [a, e] = in_piece(lo, lo + shape_numel(p.shape), rank_of(b), L);
      if (e <= a) continue;
      copy_to(be_, fp32_send_[b].flat(pos, {e - a}), mine.flat(a - rank_of(b) * L, {e - a}));
      pos += e - a;
    }
    fp32_out_[b] = be_.empty({S * size_of(b)}, DType::F32);
    fp32_work_[b] = comm_of(b).all_gather(fp32_out_[b], fp32_send_[b]);
  }
  if (on_gather) on_gather(static_cast<int>(b), 0);
}

void ParamAndGradBuffer::unpack_fp32(size_t b) {
  const int64_t L = piece_len_[b], S = fp32_part_len_[b];
  for (int64_t q = 0; q < size_of(b); ++q) {
    int64_t pos = 0, packed = 0;
    for (size_t i : fp32_params_[b]) {
      const model::Param& p = params_.params()[i];
      const int64_t lo = p.offset - buckets_[b].begin, n = shape_numel(p.shape);
      const auto [a, e] = in_piece(lo, lo + n, q, L);
      if (e > a) {
        copy_to(be_, gathered_[b].flat(packed + a - lo, {e - a}), fp32_out_[b].flat(q * S + pos, {e - a}));
        pos += e - a;
      }
      packed += n;
    }
  }
}

void ParamAndGradBuffer::wait_gather_params(size_t b) {
  start_gather(b);
  if (!z3_work_[b]) return;
  z3_work_[b]->wait();
  z3_work_[b].reset();
  const BucketRange& r = buckets_[b];
  if (gather_compute_) {
    z3_send_[b] = Tensor();
    if (fp32_work_[b]) {
      fp32_work_[b]->wait();
      fp32_work_[b].reset();
      unpack_fp32(b);
      fp32_send_[b] = fp32_out_[b] = Tensor();
    }
    // Every view at the gathered compute copy, no fp32 value; then the fp32
    // parameters one by one (bind_values keeps a LayerNorm's compute on its value).
    const Tensor compute = gathered_compute_[b].flat(0, {r.numel()});
    params_.bind_values(r.begin, r.numel(), Tensor(), compute);
    int64_t packed = 0;
    for (size_t i : fp32_params_[b]) {
      const model::Param& p = params_.params()[i];
      const int64_t n = shape_numel(p.shape);
      params_.bind_values(p.offset, n, gathered_[b].flat(packed, {n}), compute.flat(p.offset - r.begin, {n}));
      packed += n;
    }
    if (on_gather) on_gather(static_cast<int>(b), 1);
    return;
  }
  Tensor values = gathered_[b].flat(0, {r.numel()});
  Tensor compute;
  if (params_.compute_dtype() != DType::F32) {  // the bf16/fp16 copy the layers compute with
    gathered_compute_[b] = be_.empty({r.numel()}, params_.compute_dtype());
    be_.cast(gathered_compute_[b], values);
    compute = gathered_compute_[b];
  }
  params_.bind_values(r.begin, r.numel(), values, compute);
  if (on_gather) on_gather(static_cast<int>(b), 1);
}

void ParamAndGradBuffer::release_params(size_t b) {
  if (!gathered_[b].defined()) return;
  for (auto* w : {&z3_work_[b], &fp32_work_[b]})
    if (*w) {  // prefetched, never used
      (*w)->wait();
      w->reset();
    }
  params_.bind_values(buckets_[b].begin, buckets_[b].numel(), Tensor(), Tensor());
  gathered_[b] = gathered_compute_[b] = z3_send_[b] = fp32_send_[b] = fp32_out_[b] = Tensor();
  if (on_gather) on_gather(static_cast<int>(b), 2);
}

int64_t ParamAndGradBuffer::gathered_numel() const {
  int64_t n = 0;
  for (size_t b = 0; b < gathered_.size(); ++b) {
    const Tensor& t = gather_compute_ ? gathered_compute_[b] : gathered_[b];
    n += t.defined() ? t.numel() : 0;
  }
  return n;
}

std::vector<ParamAndGradBuffer::ShardPart> ParamAndGradBuffer::shard_parts(size_t b, int64_t begin,
                                                                          int64_t numel) const {
  TRIPOD_CHECK(distributed_, "shard_parts: the distributed optimizer's shards only");
  const BucketRange& r = buckets_[b];
  std::vector<ShardPart> parts;
  for (int q = 0; q < size_of(b); ++q) {
    const auto [lo, hi] = in_piece(begin - r.begin, begin - r.begin + numel, q, piece_len_[b]);
    if (lo < hi) parts.push_back({q, r.begin + lo, hi - lo, shard_offset_[b] + lo - q * piece_len_[b]});
  }
  return parts;
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
    if (skips_params_ && !packed_runs_[k].empty()) {  // NOTE [FP8 parameter all-gather]
      start_packed_sync(k, value_shard);
      continue;
    }
    if (!staging_[k].defined() && piece_len_[k] * size_of(k) != r.numel())  // ZeRO-2: until wait_gather
      staging_[k] = be_.empty({piece_len_[k] * size_of(k)}, DType::F32);
    Tensor out = staging_[k].defined() ? staging_[k] : params_.values().flat(r.begin, {r.numel()});
    gather_work_[k] = comm_of(k).all_gather(out, value_shard.flat(shard_offset_[k], {piece_len_[k]}));
  }
}

void ParamAndGradBuffer::wait_gather(size_t b) {
  if (!gather_work_[b]) return;
  gather_work_[b]->wait();
  gather_work_[b].reset();
  const BucketRange& r = buckets_[b];
  if (skips_params_ && !packed_runs_[b].empty()) {
    finish_packed_sync(b);
  } else if (staging_[b].defined())
    copy_to(be_, params_.values().flat(r.begin, {r.numel()}), staging_[b].flat(0, {r.numel()}));
  if (shard_grads_) staging_[b] = Tensor();
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
