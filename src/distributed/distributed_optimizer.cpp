// Implementation of distributed/distributed_optimizer.h.
#include "distributed/distributed_optimizer.h"

#include <algorithm>
#include <cmath>

#include "base/debug_config.h"
#include "base/error.h"
#include "distributed/finalize_model_grads.h"

namespace tripod::distributed {
namespace {

// Whether a parameter counts in the grad norm (see get_grad_norm): the last
// stage's copy of the tied embedding (post_process without pre_process
// means more than one stage) and tp duplicates on tp ranks > 0 do not.
// `experts_apart`: with ep > 1 and --expert-tensor-parallel-size 1 the
// routed experts are not replicated over tp (the ep group folds onto the tp
// ranks), so every rank counts its own. With the experts split over tp
// (etp = tp) they follow the dense rule: pieces everywhere, fc2's whole bias
// on tp rank 0.
bool counts_in_grad_norm(const model::Param& p, const model::StageConfig& st, int tp_rank, bool pipeline,
                         bool experts_apart) {
  if (tp_rank != 0 && p.spec.shard == model::ShardDim::None && !(experts_apart && p.spec.expert >= 0)) return false;
  return !(pipeline && st.post_process && !st.pre_process && p.spec.role == model::ParamRole::WordEmbeddings);
}

// Which rank of each bucket's group writes its parameters (-1: none of
// them; hybrid sharding's other instances and cp ranks > 0 hold copies that
// are not written), agreed once per group: a Max all-reduce of (rank,
// size - 1 - rank) of the ranks that write, so that two writers in one group
// are caught. Groups in the order the buckets first name them, the same on
// every rank of a group (their buffers have the same layout).
std::vector<int> writer_ranks(ParamAndGradBuffer& buf, backend::Backend& be,
                              const std::function<bool(const model::Param&)>& writes) {
  const auto& ps = buf.params().params();
  std::vector<comm::Communicator*> groups;
  std::vector<bool> writes_in;  // per group: this rank writes a parameter of it
  for (size_t b = 0; b < buf.buckets().size(); ++b) {
    comm::Communicator* g = &buf.bucket_group(b);
    const size_t k = static_cast<size_t>(std::find(groups.begin(), groups.end(), g) - groups.begin());
    if (k == groups.size()) {
      groups.push_back(g);
      writes_in.push_back(false);
    }
    const BucketRange& r = buf.buckets()[b];
    for (int i = r.first_param; i < r.end_param; ++i) writes_in[k] = writes_in[k] || writes(ps[static_cast<size_t>(i)]);
  }
  std::vector<int> root_of_group;
  for (size_t k = 0; k < groups.size(); ++k) {
    comm::Communicator& g = *groups[k];
    const int32_t v[2] = {writes_in[k] ? g.rank() : -1, writes_in[k] ? g.size() - 1 - g.rank() : -1};
    Tensor h = Tensor::empty({2}, DType::I32);
    std::copy(v, v + 2, h.data<int32_t>());
    if (g.size() > 1) {
      Tensor d = be.empty({2}, DType::I32);
      be.copy(d, h);
      comm::AllReduceOptions o;
      o.op = comm::ReduceOp::Max;
      g.all_reduce(d, o)->wait();
      be.copy(h, d);
      be.synchronize();
    }
    const int last = h.data<int32_t>()[0], first = g.size() - 1 - h.data<int32_t>()[1];
    TRIPOD_CHECK(last < 0 || last == first, "checkpoint save: ranks {} and {} of group {} both write its parameters",
                 first, last, g.name());
    root_of_group.push_back(last);
  }
  std::vector<int> root;
  for (size_t b = 0; b < buf.buckets().size(); ++b)
    root.push_back(root_of_group[static_cast<size_t>(
        std::find(groups.begin(), groups.end(), &buf.bucket_group(b)) - groups.begin())]);
  return root;
}

// out (on `root`) <- elements [begin, begin + numel) of the flat buffer,
// inside bucket b, from the ranks' `shard`s: root copies its own part, the
// other holders send theirs to it (at most two ranks when numel <= the
// piece length). Collective over b's group.
void gather_piece(ParamAndGradBuffer& buf, backend::Backend& be, size_t b, int64_t begin, int64_t numel,
                  const Tensor& shard, int root, Tensor& out) {
  comm::Communicator& g = buf.bucket_group(b);
  const int me = g.rank();
  std::vector<Tensor> views;
  std::vector<std::shared_ptr<comm::Work>> works;
  const auto parts = buf.shard_parts(b, begin, numel);
  views.reserve(parts.size());
  for (const auto& part : parts) {
    if (me != root && me != part.rank) continue;
    const Tensor src = shard.flat(part.shard_offset, {part.numel});
    if (me != root) {
      works.push_back(g.send(src, root));
      continue;
    }
    views.push_back(out.flat(part.begin - begin, {part.numel}));
    if (part.rank == root) be.copy(views.back(), src);
    else works.push_back(g.recv(views.back(), part.rank));
  }
  for (auto& w : works) w->wait();
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(DistributedDataParallel& ddp, const parallel::ProcessGroups& groups,
                                           backend::Backend& be, const optim::AdamWConfig& config)
    : ddp_(ddp), groups_(groups), be_(be), sharded_(ddp.config().use_distributed_optimizer) {
  const int tp_rank = groups_.layout.tp_rank(groups_.global_rank);
  const bool pipeline = groups_.layout.pp > 1;
  const bool apart = groups_.layout.ep > 1 && groups_.layout.etp == 1;
  for (int c = 0; c < ddp_.num_chunks(); ++c) {
    const ParamAndGradBuffer& buf = ddp_.buffer(c);
    const model::StageConfig& st = ddp_.model(c).stage();
    ChunkState cs;
    const int64_t len = buf.shard_numel();
    cs.segments = buf.shard_segments([](const model::Param&) { return true; });
    // The counted ranges are merged once here, with no decay flags. Not
    // sharded with expert parallelism, the experts' sum is its own: each ep
    // rank holds other experts (get_grad_norm).
    const bool split = !sharded_ && groups_.layout.ep > 1;
    cs.norm_segments = buf.shard_segments(
        [&](const model::Param& p) {
          return counts_in_grad_norm(p, st, tp_rank, pipeline, apart) && !(split && p.spec.expert >= 0);
        },
        false);
    if (split)
      cs.expert_norm_segments = buf.shard_segments(
          [&](const model::Param& p) {
            return counts_in_grad_norm(p, st, tp_rank, pipeline, apart) && p.spec.expert >= 0;
          },
          false);
    cs.adam = std::make_unique<optim::AdamW>(be_, len, config);
    if (!sharded_) {
      // step() writes the compute copy of exactly these ranges and casts
      // nothing else: they must cover every parameter (the padding past
      // them is zero in both copies and never written).
      int64_t covered = 0;
      for (const auto& seg : cs.segments) covered += seg.numel;
      TRIPOD_CHECK(covered == buf.params().numel(), "optimizer segments cover {} of the {} parameters of chunk {}",
                   covered, buf.params().numel(), c);
    } else if (!buf.shards_params()) {
      cs.value_shard = be_.empty({len}, DType::F32);
      be_.zero(cs.value_shard);
    }
    chunks_.push_back(std::move(cs));
  }
}

DistributedOptimizer::~DistributedOptimizer() = default;

void DistributedOptimizer::reduce_grads() { finalize_model_grads(ddp_, groups_); }

double DistributedOptimizer::get_grad_norm() {
  Tensor acc = be_.empty({1}, DType::F32);
  be_.zero(acc);
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const Tensor& grads = ddp_.buffer(static_cast<int>(c)).reduced_grads();
    for (const auto& seg : chunks_[c].norm_segments) be_.sum_squares(acc, grads.flat(seg.offset, {seg.numel}));
  }
  // Sharded: every shard once, so over the world, or with several
  // distributed-optimizer instances over one of them (mp x intra_dp_cp).
  auto& group = !sharded_ ? groups_.mp : groups_.intra_dist_opt ? groups_.intra_dist_opt : groups_.world;
  if (group->size() > 1) group->all_reduce(acc)->wait();
  // Not sharded, with expert parallelism: every expert once, as Megatron's
  // get_grad_norm_fp32 over the expert model-parallel group: this rank's
  // experts' sum over the ep group (each ep group holds every expert of a
  // stage once), over the expert-tp group (etp = tp: the experts' pieces),
  // then over the stages, added to the dense sum (which the
  // tp ranks of a folded ep group would otherwise count again). (Sharded,
  // the world sum above counts every dense piece and every expert piece
  // once already.)
  if (!sharded_ && groups_.layout.ep > 1) {
    Tensor expert = be_.empty({1}, DType::F32);
    be_.zero(expert);
    for (size_t c = 0; c < chunks_.size(); ++c) {
      const Tensor& grads = ddp_.buffer(static_cast<int>(c)).reduced_grads();
      for (const auto& seg : chunks_[c].expert_norm_segments)
        be_.sum_squares(expert, grads.flat(seg.offset, {seg.numel}));
    }
    groups_.ep->all_reduce(expert)->wait();
    if (groups_.layout.etp > 1) groups_.tp->all_reduce(expert)->wait();  // the expert-tp pieces (etp = tp)
    if (groups_.layout.pp > 1) groups_.pp->all_reduce(expert)->wait();
    be_.add(acc, acc, expert);
  }
  Tensor h = Tensor::empty({1}, DType::F32);
  be_.copy(h, acc);
  be_.synchronize();
  return std::sqrt(static_cast<double>(h.data<float>()[0]));
}

void DistributedOptimizer::step(double lr, float grad_scale, double decoupled_lr) {
  ddp_.finish_param_sync();  // normally already waited for by the forwards
  const bool overlap = ddp_.overlap_param_gather();
  for (size_t c = 0; c < chunks_.size(); ++c) {
    ChunkState& cs = chunks_[c];
    ParamAndGradBuffer& buf = ddp_.buffer(static_cast<int>(c));
    auto& params = buf.params();
    if (!sharded_) {
      // The update writes the bf16/fp16 compute copy in the same pass over
      // the master weights (TRIPOD_UNFUSED_ADAMW_CAST=1: update, then a
      // separate cast of the whole buffer; the same bits, for A/B timings).
      Tensor* compute = params.compute_dtype() == DType::F32 ? nullptr : &params.compute_values();
      if (debug_config().unfused_adamw_cast) compute = nullptr;
      cs.adam->step(params.values(), params.grads(), cs.segments, lr, grad_scale, compute, decoupled_lr);
      if (!compute) params.sync_compute();  // no-op in f32
      continue;
    }
    if (buf.shards_params()) {  // ZeRO-3: the shard is the parameters; the next forward gathers them
      // A copy still gathered (a prefetch no forward used) would be stale.
      for (size_t b = 0; b < buf.buckets().size(); ++b) buf.release_params(b);
      cs.adam->step(buf.value_shard(), buf.reduced_grads(), cs.segments, lr, grad_scale, nullptr, decoupled_lr);
      continue;
    }
    // Step the fp32 master shard, then all-gather the updated parameters
    // (with --overlap-param-gather: launched now, waited per bucket by the
    // next forward, which also casts the compute copies).
    buf.take_shard(cs.value_shard, params.values());
    cs.adam->step(cs.value_shard, buf.reduced_grads(), cs.segments, lr, grad_scale, nullptr, decoupled_lr);
    if (overlap) {
      buf.start_param_sync(cs.value_shard);
    } else if (buf.skips_params()) {  // --fp8-param-gather: the f32 gather without the FP8 weights
      buf.start_param_sync(cs.value_shard);
      buf.finish_param_sync();
    } else {
      buf.gather_shards(params.values(), cs.value_shard);
    }
  }
  // Sharded: the bf16/fp16 compute copies from the gathered fp32 masters
  // (this rank updated only its shard; the all-gather moves the fp32
  // masters, which every rank keeps whole for the LayerNorms, which compute
  // with them, and for checkpoints).
  if (sharded_ && !overlap)  // (no-op under ZeRO-3: no flat values)
    for (int c = 0; c < ddp_.num_chunks(); ++c) ddp_.model(c).params().sync_compute();
}

int64_t DistributedOptimizer::steps() const { return chunks_.front().adam->steps(); }

int64_t DistributedOptimizer::shard_numel() const {
  int64_t n = 0;
  for (int c = 0; c < ddp_.num_chunks(); ++c) n += ddp_.buffer(c).shard_numel();
  return n;
}

std::pair<Tensor, Tensor> DistributedOptimizer::state(int chunk) {
  ChunkState& cs = chunks_.at(static_cast<size_t>(chunk));
  if (!sharded_) return {cs.adam->exp_avg(), cs.adam->exp_avg_sq()};
  // Full-parameter order (the checkpoint format), whatever the shard layout.
  ParamAndGradBuffer& buf = ddp_.buffer(chunk);
  const int64_t total = buf.params().padded_numel();
  Tensor m = be_.empty({total}, DType::F32), v = be_.empty({total}, DType::F32);
  buf.gather_shards(m, cs.adam->exp_avg());
  buf.gather_shards(v, cs.adam->exp_avg_sq());
  return {m, v};
}

void DistributedOptimizer::set_state(int chunk, const Tensor& exp_avg, const Tensor& exp_avg_sq, int64_t steps) {
  ChunkState& cs = chunks_.at(static_cast<size_t>(chunk));
  const ParamAndGradBuffer& buf = ddp_.buffer(chunk);
  buf.take_shard(cs.adam->exp_avg(), exp_avg);
  buf.take_shard(cs.adam->exp_avg_sq(), exp_avg_sq);
  cs.adam->set_steps(steps);
}

void DistributedOptimizer::load_state(int chunk, const std::function<Tensor(const model::Param&, int)>& moment,
                                      int64_t steps) {
  TRIPOD_CHECK(sharded_, "load_state: the distributed optimizer only (set_state otherwise)");
  ChunkState& cs = chunks_.at(static_cast<size_t>(chunk));
  ParamAndGradBuffer& buf = ddp_.buffer(chunk);
  Tensor* moments[2] = {&cs.adam->exp_avg(), &cs.adam->exp_avg_sq()};
  for (int k = 0; k < 2; ++k) {
    be_.zero(*moments[k]);  // the padding between parameters, as set_state's zero-filled whole moments give
    buf.fill_shard(*moments[k], [&](const model::Param& p) { return moment(p, k); });
  }
  cs.adam->set_steps(steps);
}

// NOTE [Streamed shard save]: a checkpoint holds each parameter's whole
// (tp-local) value and moments, in full-parameter order, but under the
// distributed optimizer the moments, and under ZeRO-3 the values, exist only
// as the dp ranks' shards. Instead of gathering them whole on every rank
// (12 bytes a parameter), the writer of each group receives one piece at a
// time, at most `window` elements of one parameter: for each parameter in
// ParamStore order, its value, exp_avg and exp_avg_sq, each cut into
// pieces; the ranks whose shard holds part of a piece send that part to the
// writer (ParamAndGradBuffer::shard_parts), which copies its own part and
// hands the piece to write(), in the file's order, so the bytes are those of
// the whole-tensor save. Whole tensors (the values under ZeRO-1/2 and
// without sharding, the moments without the distributed optimizer) are
// copied to the host piece by piece too. So the writer holds two buffers of
// min(window, largest parameter it writes) elements (the piece on the device
// and its host copy; one on the CPU backend, where they are the same), the
// other ranks nothing beyond the send of a view of their shard.
void DistributedOptimizer::save_state(int chunk, const std::function<bool(const model::Param&)>& writes,
                                      const std::function<void(const float*, int64_t)>& write, int64_t window) {
  TRIPOD_CHECK(window > 0, "save_state: window {} must be positive", window);
  ChunkState& cs = chunks_.at(static_cast<size_t>(chunk));
  ParamAndGradBuffer& buf = ddp_.buffer(chunk);
  const auto& ps = buf.params().params();
  // --fp8-param-gather under ZeRO-1/2: the f32 all-gather leaves the FP8
  // weights out (NOTE [FP8 parameter all-gather]), so the whole values hold
  // only this rank's pieces of them current: the values are saved from the
  // shards too, this rank's taken from the values (current after a step and
  // after a load alike).
  const bool values_skipped = sharded_ && !buf.shards_params() && buf.skips_params();
  if (values_skipped) buf.take_shard(cs.value_shard, buf.params().values());
  // The value, exp_avg and exp_avg_sq: laid out as the shard, or whole (flat-buffer order).
  const Tensor* source[3] = {buf.shards_params()  ? &buf.value_shard()
                             : values_skipped     ? &cs.value_shard
                                                  : &buf.params().values(),
                             &cs.adam->exp_avg(), &cs.adam->exp_avg_sq()};
  const bool in_shards[3] = {buf.shards_params() || values_skipped, sharded_, sharded_};
  const std::vector<int> root = sharded_ ? writer_ranks(buf, be_, writes) : std::vector<int>{};
  int64_t largest = 0;
  for (const auto& p : ps)
    if (writes(p)) largest = std::max(largest, shape_numel(p.shape));
  const bool on_host = be_.device().type == DeviceType::CPU;
  Tensor stage, host;  // the writer's piece, reused: where it is gathered (the device) and its host copy
  if (largest > 0) {
    stage = be_.empty({std::min(window, largest)}, DType::F32);
    host = on_host ? stage : Tensor::empty(stage.shape(), DType::F32);
  }
  for (size_t i = 0; i < ps.size(); ++i) {
    const model::Param& p = ps[i];
    const size_t b = static_cast<size_t>(buf.bucket_of(i));
    const bool mine = writes(p);
    if ((sharded_ ? root[b] : mine ? 0 : -1) < 0) continue;  // nobody in this group writes it
    const int64_t n = shape_numel(p.shape);
    for (int k = 0; k < 3; ++k)
      for (int64_t lo = 0; lo < n; lo += window) {
        const int64_t len = std::min(window, n - lo);
        Tensor piece = mine ? stage.flat(0, {len}) : Tensor();
        if (in_shards[k]) gather_piece(buf, be_, b, p.offset + lo, len, *source[k], root[b], piece);
        else if (mine) be_.copy(piece, source[k]->flat(p.offset + lo, {len}));
        if (!mine) continue;
        if (!on_host) {
          Tensor h = host.flat(0, {len});
          be_.copy(h, piece);
        }
        be_.synchronize();
        write(host.data<float>(), len);
      }
  }
}

}  // namespace tripod::distributed
