// Implementation of distributed/distributed_optimizer.h.
#include "distributed/distributed_optimizer.h"

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

}  // namespace tripod::distributed
