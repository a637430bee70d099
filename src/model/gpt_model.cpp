// Implementation of model/gpt_model.h: construction, parameter table,
// activation buffers, and the stage-level forward/backward. The transformer
// layer itself is model/transformer_layer.h.
#include "model/gpt_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "base/error.h"
#include "backend/philox.h"
#include "model/moe_layer.h"
#include "model/workspace.h"

namespace tripod::model {

std::vector<ParamSpec> GptModel::all_param_specs(const GptConfig& c, int64_t Vp) {
  using R = ParamRole;
  using Col = ColumnParallelLinear;
  using Row = RowParallelLinear;
  const int64_t C = c.hidden_size, F = c.ffn_hidden_size, F1 = c.fc1_width();
  const bool bias = c.add_bias_linear, ln_bias = !c.rmsnorm();
  constexpr ShardDim kReplicated = ShardDim::None;
  // qkv: [Q | K | V] thirds (GPT-2), or grouped-query in Megatron's
  // per-group layout (G, k+2, HS[, C]) (param_table.h, ShardDim::QkvGroups).
  const int64_t G = c.query_groups(), HS = c.head_size(), k = c.num_attention_heads / G;
  const Shape qkv_w = c.group_query_attention ? Shape{G, k + 2, HS, C} : Shape{3 * C, C};
  const Shape qkv_b = c.group_query_attention ? Shape{G, k + 2, HS} : Shape{3 * C};
  const ShardDim qkv_shard = c.group_query_attention ? Col::kGroupedQkvShard : Col::kFusedQkvShard;
  const ShardDim fc1_shard = c.swiglu ? Col::kGluShard : Col::kWeightShard;
  std::vector<ParamSpec> s;
  auto add = [&](std::string name, Shape shape, ShardDim shard, InitKind init, bool decay, int layer, R role) {
    s.push_back({std::move(name), std::move(shape), shard, init, decay, layer, role});
  };
  add("embedding.word_embeddings.weight", {Vp, C}, VocabParallelEmbedding::kWeightShard, InitKind::Normal, true, -1,
      R::WordEmbeddings);
  if (c.learned_positions())
    add("embedding.position_embeddings.weight", {c.max_position_embeddings, C}, kReplicated, InitKind::Normal, true,
        -1, R::PositionEmbeddings);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("decoder.layers.{}.", l);
    const int li = static_cast<int>(l);
    add(p + "input_layernorm.weight", {C}, kReplicated, InitKind::Ones, false, li, R::InputLayernormWeight);
    if (ln_bias)
      add(p + "input_layernorm.bias", {C}, kReplicated, InitKind::Zeros, false, li, R::InputLayernormBias);
    add(p + "self_attention.linear_qkv.weight", qkv_w, qkv_shard, InitKind::Normal, true, li, R::LinearQkvWeight);
    if (bias)
      add(p + "self_attention.linear_qkv.bias", qkv_b, qkv_shard, InitKind::Zeros, false, li, R::LinearQkvBias);
    if (c.qk_layernorm)  // replicated over tp (heads are split, HS is not); not decayed, as Megatron's default
      for (const auto& [name, w, b] : {std::tuple{"q_layernorm", R::QLayernormWeight, R::QLayernormBias},
                                       std::tuple{"k_layernorm", R::KLayernormWeight, R::KLayernormBias}}) {
        add(p + "self_attention." + name + ".weight", {c.head_size()}, kReplicated, InitKind::Ones, false, li, w);
        if (ln_bias) add(p + "self_attention." + name + ".bias", {c.head_size()}, kReplicated, InitKind::Zeros, false, li, b);
      }
    add(p + "self_attention.linear_proj.weight", {C, C}, Row::kWeightShard, InitKind::ScaledNormal, true, li,
        R::LinearProjWeight);
    if (bias)
      add(p + "self_attention.linear_proj.bias", {C}, Row::kBiasShard, InitKind::Zeros, false, li,
          R::LinearProjBias);
    add(p + "pre_mlp_layernorm.weight", {C}, kReplicated, InitKind::Ones, false, li, R::PreMlpLayernormWeight);
    if (ln_bias)
      add(p + "pre_mlp_layernorm.bias", {C}, kReplicated, InitKind::Zeros, false, li, R::PreMlpLayernormBias);
    if (c.layer_spec(l).moe()) {
      add_moe_param_specs(s, c, li, p);
      continue;
    }
    add(p + "mlp.linear_fc1.weight", {F1, C}, fc1_shard, InitKind::Normal, true, li, R::LinearFc1Weight);
    if (bias) add(p + "mlp.linear_fc1.bias", {F1}, fc1_shard, InitKind::Zeros, false, li, R::LinearFc1Bias);
    add(p + "mlp.linear_fc2.weight", {C, F}, Row::kWeightShard, InitKind::ScaledNormal, true, li,
        R::LinearFc2Weight);
    if (bias) add(p + "mlp.linear_fc2.bias", {C}, Row::kBiasShard, InitKind::Zeros, false, li, R::LinearFc2Bias);
  }
  add("decoder.final_layernorm.weight", {C}, kReplicated, InitKind::Ones, false, -1, R::FinalLayernormWeight);
  if (ln_bias)
    add("decoder.final_layernorm.bias", {C}, kReplicated, InitKind::Zeros, false, -1, R::FinalLayernormBias);
  if (c.untie_embeddings_and_output_weights)
    add("output_layer.weight", {Vp, C}, Col::kWeightShard, InitKind::Normal, true, -1, R::OutputLayerWeight);
  return s;
}

GptModel::GptModel(const GptConfig& config, const StageConfig& stage, backend::Backend& be)
    : config_(config), stage_(stage), be_(be) {
  config_.finalize();
  if (stage_.num_local_layers < 0) stage_.num_local_layers = config_.num_layers - stage_.first_layer;
  TRIPOD_CHECK(stage_.first_layer >= 0 && stage_.first_layer + stage_.num_local_layers <= config_.num_layers,
               "stage layers [{}, {}) outside the model's {} layers", stage_.first_layer,
               stage_.first_layer + stage_.num_local_layers, config_.num_layers);
  const int64_t tp = stage_.tp_size();
  padded_vocab_ = config_.padded_vocab_size(static_cast<int>(tp));
  tp_.group = stage_.tp;
  tp_.sequence_parallel = stage_.sequence_parallel_active();
  TRIPOD_CHECK_HINT(config_.num_attention_heads % tp == 0, "choose a --tensor-model-parallel-size that divides the heads",
                    "--num-attention-heads {} is not divisible by --tensor-model-parallel-size {}",
                    config_.num_attention_heads, tp);
  TRIPOD_CHECK_HINT(config_.query_groups() % tp == 0,
                    "choose a --tensor-model-parallel-size that divides --num-query-groups (each rank holds whole "
                    "groups, as Megatron)",
                    "--num-query-groups {} is not divisible by --tensor-model-parallel-size {}",
                    config_.query_groups(), tp);
  TRIPOD_CHECK_HINT(config_.ffn_hidden_size % tp == 0, "choose a --tensor-model-parallel-size that divides the MLP width",
                    "--ffn-hidden-size {} is not divisible by --tensor-model-parallel-size {}",
                    config_.ffn_hidden_size, tp);
  TRIPOD_CHECK_HINT(!tp_.sequence_parallel || config_.seq_length % tp == 0,
                    "use a --seq-length divisible by --tensor-model-parallel-size, or drop --sequence-parallel",
                    "--sequence-parallel needs --seq-length {} divisible by --tensor-model-parallel-size {}",
                    config_.seq_length, tp);
  const int cp = stage_.cp_size();  // each cp rank's T / cp rows are what sequence parallelism splits
  TRIPOD_CHECK_HINT(!tp_.sequence_parallel || (config_.seq_length / cp) % tp == 0,
                    "use a --seq-length divisible by --tensor-model-parallel-size x --context-parallel-size, or drop "
                    "--sequence-parallel",
                    "--sequence-parallel needs --seq-length {} / --context-parallel-size {} divisible by "
                    "--tensor-model-parallel-size {}",
                    config_.seq_length, cp, tp);
  if (config_.moe.enabled()) {
    TRIPOD_CHECK_HINT(config_.moe.num_experts % stage_.ep_size() == 0,
                      "choose an --expert-model-parallel-size that divides --num-experts",
                      "--num-experts {} is not divisible by --expert-model-parallel-size {}", config_.moe.num_experts,
                      stage_.ep_size());
    const int64_t Fe = config_.moe.ffn_hidden_size > 0 ? config_.moe.ffn_hidden_size : config_.ffn_hidden_size;
    TRIPOD_CHECK_HINT(!stage_.expert_tensor_parallel || Fe % stage_.tp_size() == 0,
                      "choose a --moe-ffn-hidden-size divisible by --expert-tensor-parallel-size (its default is the "
                      "--tensor-model-parallel-size), or pass --expert-tensor-parallel-size 1",
                      "--moe-ffn-hidden-size {} is not divisible by --expert-tensor-parallel-size {}", Fe,
                      stage_.tp_size());
    TRIPOD_CHECK_HINT(!config_.fp8.enabled(), "drop --fp8-format for the MoE model",
                      "FP8 expert GEMMs are not in this version yet");
  }
  // Keep the parameters this stage holds. The tied output layer reuses the
  // word embedding, so the last stage holds a copy of it too (Megatron).
  // Expert parallelism: of an MoE layer's experts only this ep rank's
  // E / ep, [ep_rank E/ep, (ep_rank + 1) E/ep) (NOTE [Expert buckets] in
  // distributed/param_and_grad_buffer.h reduces them over edp).
  const int64_t local_experts = config_.moe.enabled() ? config_.moe.num_experts / stage_.ep_size() : 0;
  const int64_t first_expert = local_experts * stage_.ep_rank();
  std::vector<ParamSpec> mine;
  for (auto& s : all_param_specs(config_, padded_vocab_))
    if (stage_holds(s, stage_.first_layer, stage_.num_local_layers, stage_.pre_process, stage_.post_process,
                    !config_.untie_embeddings_and_output_weights) &&
        (s.expert < 0 || (s.expert >= first_expert && s.expert < first_expert + local_experts))) {
      // With ep > 1 the ep group folds onto the tp ranks (NOTE [Expert rank
      // order]): tp peers may hold other experts, so a routed expert's
      // gradient is summed over edp only (which spans the tp ranks that
      // hold the same experts), never over the whole tp group.
      if (s.expert >= 0 && stage_.ep_size() > 1) s.sequence_parallel = false;
      // --expert-tensor-parallel-size = tp: a routed expert's fc1 is split
      // by columns (SwiGLU: the gate and up halves alike, as the dense
      // MLP's) and its fc2 by rows over the tp group; the fc2 bias stays
      // whole. Each tp rank computes its piece from the whole group's
      // tokens (moe_layer.cpp), so nothing is summed over tp.
      if (s.expert >= 0 && stage_.expert_tensor_parallel) {
        using R = ParamRole;
        if (s.role == R::ExpertFc1Weight || s.role == R::ExpertFc1Bias)
          s.shard = config_.swiglu ? ColumnParallelLinear::kGluShard : ColumnParallelLinear::kWeightShard;
        else if (s.role == R::ExpertFc2Weight)
          s.shard = RowParallelLinear::kWeightShard;
        s.sequence_parallel = false;
      }
      mine.push_back(std::move(s));
    }
  params_ = std::make_unique<ParamStore>(std::move(mine), stage_.tp_size(), stage_.tp_rank(), be_,
                                         stage_.param_buffer_pad, stage_.compute_dtype, stage_.flat_grads,
                                         stage_.flat_values);
  ws_ = std::make_unique<Workspace>();
  sp_ = resolve_params(*params_, config_, stage_.first_layer, stage_.num_local_layers, stage_.pre_process,
                       stage_.post_process);
  int fp8_layers = 0, fp8_attentions = 0;
  for (int64_t i = 0; i < stage_.num_local_layers; ++i) {
    const config::LayerSpec ls = config_.layer_spec(stage_.first_layer + i);
    fp8_layers += ls.fp8;
    fp8_attentions += ls.fp8_attention;
  }
  if (fp8_layers > 0)
    fp8_ = std::make_unique<Fp8State>(config_.fp8, 4 * fp8_layers, be_, stage_.tp, stage_.cp, fp8_attentions);
  layers_.reserve(sp_.layers.size());
  for (size_t i = 0; i < sp_.layers.size(); ++i)
    layers_.emplace_back(config_, stage_, stage_.first_layer + static_cast<int64_t>(i), sp_.layers[i], tp_, be_,
                         fp8_.get());
  if (stage_.pre_process)
    embedding_ = VocabParallelEmbedding(sp_.embedding.word_embeddings, sp_.embedding.position_embeddings, tp_);
  if (stage_.post_process)
    output_layer_ = ColumnParallelLinear(
        sp_.embedding.output_layer ? sp_.embedding.output_layer : sp_.embedding.word_embeddings, nullptr, tp_);
  cross_entropy_ = VocabParallelCrossEntropy(tp_);
  // The hook groups (param_groups()): embedding, one per local layer, head.
  std::vector<size_t> embedding, head;
  std::vector<std::vector<size_t>> layers(static_cast<size_t>(stage_.num_local_layers));
  const auto& ps = params_->params();
  for (size_t i = 0; i < ps.size(); ++i) {
    const ParamSpec& s = ps[i].spec;
    if (s.layer >= 0)
      layers[static_cast<size_t>(s.layer - stage_.first_layer)].push_back(i);
    else if (s.role == ParamRole::FinalLayernormWeight || s.role == ParamRole::FinalLayernormBias ||
             s.role == ParamRole::OutputLayerWeight || !stage_.pre_process)
      head.push_back(i);  // final norm, the output layer, or the tied output weight of a last stage
    else
      embedding.push_back(i);
  }
  if (!embedding.empty()) {
    embedding_group_ = static_cast<int>(groups_.size());
    groups_.push_back(std::move(embedding));
  }
  first_layer_group_ = static_cast<int>(groups_.size());
  for (auto& l : layers) groups_.push_back(std::move(l));
  if (!head.empty()) {
    head_group_ = static_cast<int>(groups_.size());
    groups_.push_back(std::move(head));
  }
}

GptModel::~GptModel() = default;

const Tensor& GptModel::last_logits() const {
  TRIPOD_CHECK(stage_.post_process && ws_->logits.defined(), "no logits: not the last stage, or no forward yet");
  TRIPOD_CHECK(!last_head_chunked_, "no logits: the last forward computed them in chunks (loss_chunk_bytes)");
  return ws_->logits;
}

MicroBatchActs GptModel::make_acts(int64_t B, int64_t T) const {
  const int64_t N = B * T, C = config_.hidden_size, Ns = local_rows(B, T);
  auto act = [&](Shape s) { return be_.empty(s, stage_.compute_dtype); };
  auto f32 = [&](Shape s) { return be_.empty(s, DType::F32); };
  MicroBatchActs a;
  a.B = B;
  a.T = T;
  a.tokens = be_.empty({B, T}, DType::I32);
  a.input = act({Ns, C});
  for (const TransformerLayer& layer : layers_) a.layers.push_back(layer.make_acts(B, T));
  if (stage_.post_process) {
    a.targets = be_.empty({B, T}, DType::I32);
    a.lnf = act({Ns, C}); a.lnf_rstd = f32({Ns});
    if (!config_.rmsnorm()) a.lnf_mean = f32({Ns});
    a.losses = f32({N});
    a.dlnf = act({Ns, C});
  }
  if (!stage_.pre_process) a.grad_input = act({Ns, C});
  return a;
}

size_t MicroBatchActs::bytes() const {
  size_t n = input.nbytes() + lnf.nbytes() + lnf_mean.nbytes() + lnf_rstd.nbytes() + losses.nbytes() +
             dlnf.nbytes();
  for (const auto& l : layers) n += l.bytes();
  return n;
}

// NOTE [Parameter hooks]
// forward() calls before_use with a group right before it first reads those
// weights; backward() calls grads_ready with a group right after the last
// kernel that writes those gradients: the head's group (final norm; on a
// last stage without the embedding also the tied output weight, whose
// gradient the head already accumulated in forward) first, then the layers
// from last to first, then the embedding. The hooks run on the calling
// thread; on a GPU "written" means enqueued on the compute stream, which
// NCCL orders against (comm/nccl/).
void GptModel::forward(MicroBatchActs& acts, bool with_grad, float dloss, uint64_t dropout_seed,
                       const ParamHook* before_use) {
  ws_->ensure(be_, acts.B, acts.T, config_, stage_, padded_vocab_);
  acts.dloss = dloss;
  // Dropout only while training (forward with grad).
  const LayerDropout drop{with_grad ? config_.hidden_dropout : 0.f, dropout_seed, dropout_counter(acts),
                          dropout_runs(acts)};
  using Pass = ParamGatherer::Pass;
  auto use = [&](int g, Pass pass) {
    if (g < 0) return;
    if (gatherer_) gatherer_->before(g, pass);
    if (before_use && *before_use) (*before_use)(groups_[static_cast<size_t>(g)]);
  };
  auto done = [&](int g, Pass pass) {
    if (gatherer_ && g >= 0) gatherer_->after(g, pass);
  };
  if (stage_.pre_process) {
    use(embedding_group_, Pass::Forward);
    embedding_.forward(be_, acts.input, acts.tokens, ws_->full_b, cp_position_rows());
    if (config_.hidden_dropout > 0 && with_grad)
      apply_dropout(be_, acts.input, acts.input, drop, backend::mix64(dropout_seed, 0xE3B0), false);
    done(embedding_group_, Pass::Forward);
  }
  const Tensor* x = &acts.input;
  for (int64_t i = 0; i < stage_.num_local_layers; ++i) {
    LayerActs w = ws_->layer_acts(acts.layers[i], stage_.recompute, false);
    if (w.moe) {  // the auxiliary losses' share of the objective: dloss per token x the micro-batch's tokens
      w.moe->with_grad = with_grad;
      w.moe->recomputing = false;
      w.moe->aux_loss_scale = dloss * static_cast<float>(acts.B * acts.T * stage_.cp_size());  // all T rows
    }
    const int g = first_layer_group_ + static_cast<int>(i);
    use(g, Pass::Forward);
    layers_[static_cast<size_t>(i)].forward(*x, w, *ws_, drop);
    done(g, Pass::Forward);
    x = &acts.layers[i].out;
  }
  if (stage_.post_process) {
    // With gradients the head's backward runs here (NOTE [Loss head]).
    const Pass pass = with_grad ? Pass::Backward : Pass::Forward;
    // The tied output weight of a stage that also holds the embedding is in
    // the embedding's group: the head uses that group too.
    const int tied = (stage_.pre_process && !sp_.embedding.output_layer) ? embedding_group_ : -1;
    use(head_group_, pass);
    if (gatherer_ && tied >= 0) gatherer_->before(tied, pass);
    head_forward_backward(acts, with_grad, dloss);
    if (gatherer_ && tied >= 0) gatherer_->after(tied, pass);
    done(head_group_, pass);
  }
}

// NOTE [Loss head]
// The last stage computes final norm -> logits -> cross-entropy and, when
// training, the head's backward immediately: dlogits overwrite the logits
// buffer, dwte accumulates, and only d lnf (N,C) is kept for backward(). So
// no (N, V_tp) buffer lives per micro-batch, whatever the pipeline schedule.
// The rows go through in chunks of Workspace::head_rows (logits of at most
// StageConfig::loss_chunk_bytes: 1 GiB instead of 6.6 GB for GPT-2 124M at
// micro-batch 64): per chunk logits, loss and dlogits in place, d lnf rows,
// dwte +=; the tensor-parallel reduction of d lnf runs once at the end.

void GptModel::head_forward_backward(MicroBatchActs& acts, bool with_grad, float dloss) {
  const FinalNormParams& lnf_p = sp_.final_layernorm;
  const Tensor& x = acts.output();
  if (config_.rmsnorm())
    be_.rmsnorm_forward(acts.lnf, acts.lnf_rstd, x, lnf_p.weight->compute, config_.layernorm_epsilon);
  else
    be_.layernorm_forward(acts.lnf, acts.lnf_mean, acts.lnf_rstd, x, lnf_p.weight->compute, lnf_p.bias->compute,
                          config_.layernorm_epsilon);
  const int64_t N = acts.B * acts.T, R = ws_->head_rows;
  Param& W = output_layer_.weight();
  const int64_t V_tp = W.shape[0], vocab_start = stage_.tp_rank() * V_tp;
  const Tensor targets = acts.targets.view({N});
  const Tensor& lnf = output_layer_.input(acts.lnf, ws_->full_a);  // (N, C), gathered under SP
  // d lnf rows land in acts.dlnf directly when there is no tp reduction.
  Tensor& dfull = tp_.active() ? ws_->full_b : acts.dlnf;
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t n = std::min(R, N - r0);
    Tensor logits = ws_->logits.flat(0, {n, V_tp});
    const Tensor x_rows = lnf.narrow(r0, n);
    be_.matmul_forward(logits, x_rows, W.compute, nullptr);
    Tensor losses = acts.losses.narrow(r0, n), row_max = ws_->row_max.flat(0, {n}),
           sums = ws_->ce_sums.flat(0, {2, n});
    cross_entropy_.forward_backward(be_, losses, with_grad ? &logits : nullptr, logits, targets.narrow(r0, n),
                                    vocab_start, row_max, sums, dloss);
    if (!with_grad) continue;
    Tensor dx_rows = dfull.narrow(r0, n);
    be_.matmul_backward(&dx_rows, &W.grad, nullptr, logits, x_rows, W.compute);
  }
  last_head_chunked_ = R < N;
  if (!with_grad || !tp_.active()) return;
  const Tensor& dlnf = output_layer_.reduce_input_grad(dfull, acts.dlnf);
  if (dlnf.raw() != acts.dlnf.raw()) be_.copy(acts.dlnf, dlnf);
}

uint64_t GptModel::dropout_counter(const MicroBatchActs& mb) const {
  const int64_t rows_before = tp_.sequence_parallel ? stage_.tp_rank() * local_rows(mb.B, mb.T) : 0;
  return static_cast<uint64_t>((mb.sample_offset * mb.T + rows_before) * config_.hidden_size);
}

// Context parallelism: the local rows are two runs of c = T_local / 2 rows
// per sample (NOTE [Load-balanced chunks]), each contiguous in the global
// element order; under sequence parallelism this tp rank holds a slice of
// the local rows, so the runs are cut to it.
std::vector<DropoutRun> GptModel::dropout_runs(const MicroBatchActs& mb) const {
  std::vector<DropoutRun> runs;
  if (stage_.cp_size() <= 1 || config_.hidden_dropout <= 0) return runs;
  const CpChunks chunks{stage_.cp_size(), stage_.cp_rank(), mb.T * stage_.cp_size()};
  const int64_t c = chunks.chunk(), C = config_.hidden_size, n = local_rows(mb.B, mb.T);
  const int64_t lo = tp_.sequence_parallel ? stage_.tp_rank() * n : 0, hi = lo + n;
  for (int64_t b = 0; b < mb.B; ++b)
    for (int h = 0; h < 2; ++h) {
      const int64_t first = b * mb.T + h * c, start = std::max(first, lo), end = std::min(first + c, hi);
      if (start >= end) continue;
      const int64_t global_row = (mb.sample_offset + b) * chunks.seq_length + chunks.half_start(h) + (start - first);
      runs.push_back({start - lo, end - start, static_cast<uint64_t>(global_row * C)});
    }
  return runs;
}

// The learned position embedding's rows of this rank's local rows, gathered
// from the table (context parallelism only; null otherwise).
const Tensor* GptModel::cp_position_rows() {
  Param* wpe = embedding_.position();
  if (stage_.cp_size() <= 1 || !wpe) return nullptr;
  const CpChunks chunks{stage_.cp_size(), stage_.cp_rank(), ws_->T * stage_.cp_size()};
  const int64_t c = chunks.chunk();
  for (int h = 0; h < 2; ++h) {
    Tensor dst = ws_->cp_wpe.narrow(h * c, c);
    be_.copy(dst, wpe->compute.narrow(chunks.half_start(h), c));
  }
  return &ws_->cp_wpe;
}

// The position gradient of the local rows, added to the table's rows.
void GptModel::add_cp_position_grad() {
  Param* wpe = embedding_.position();
  const CpChunks chunks{stage_.cp_size(), stage_.cp_rank(), ws_->T * stage_.cp_size()};
  const int64_t c = chunks.chunk();
  for (int h = 0; h < 2; ++h) {
    Tensor g = wpe->grad.narrow(chunks.half_start(h), c);
    be_.add(g, g, ws_->cp_dwpe.narrow(h * c, c));
  }
}

void GptModel::reduce_sequence_parallel_grads() {
  for (auto& p : params_->params())
    if (has_partial_sp_grad(p)) parallel::tensor_model_parallel_all_reduce(tp_.group, p.grad);
}

void GptModel::backward(MicroBatchActs& acts, const Tensor* grad_output, uint64_t dropout_seed,
                        const ParamHook* grads_ready) {
  ws_->ensure(be_, acts.B, acts.T, config_, stage_, padded_vocab_);
  const LayerDropout drop{config_.hidden_dropout, dropout_seed, dropout_counter(acts), dropout_runs(acts)};
  using Pass = ParamGatherer::Pass;
  auto use = [&](int g) {
    if (gatherer_ && g >= 0) gatherer_->before(g, Pass::Backward);
  };
  auto ready = [&](int g) {
    if (g < 0) return;
    if (gatherer_) gatherer_->grads_written(g);
    if (grads_ready && *grads_ready) (*grads_ready)(groups_[static_cast<size_t>(g)]);
    if (gatherer_) gatherer_->after(g, Pass::Backward);
  };
  Tensor& dres = ws_->dresidual;  // (N,C): gradient w.r.t. the current residual stream
  if (stage_.post_process) {
    const FinalNormParams& lnf_p = sp_.final_layernorm;
    use(head_group_);
    be_.zero(dres);
    if (config_.rmsnorm())
      be_.rmsnorm_backward(dres, lnf_p.weight->grad, acts.dlnf, acts.output(), lnf_p.weight->compute,
                           acts.lnf_rstd);
    else
      be_.layernorm_backward(dres, lnf_p.weight->grad, lnf_p.bias->grad, acts.dlnf, acts.output(),
                             lnf_p.weight->compute, acts.lnf_mean, acts.lnf_rstd);
    ready(head_group_);
  } else {
    TRIPOD_CHECK(grad_output && grad_output->numel() == dres.numel(),
                 "backward on a middle stage needs the output gradient");
    be_.copy(dres, *grad_output);
  }
  for (int64_t i = stage_.num_local_layers - 1; i >= 0; --i) {
    const Tensor& x = i == 0 ? acts.input : acts.layers[i - 1].out;
    const TransformerLayer& layer = layers_[static_cast<size_t>(i)];
    LayerActs w = ws_->layer_acts(acts.layers[i], stage_.recompute, true);
    if (w.moe && stage_.recompute == Recompute::Full) {  // the same aux-loss gradient, statistics not counted again
      w.moe->with_grad = true;
      w.moe->recomputing = true;
      w.moe->aux_loss_scale = acts.dloss * static_cast<float>(acts.B * acts.T * stage_.cp_size());
    }
    use(first_layer_group_ + static_cast<int>(i));
    layer.recompute(x, w, *ws_, drop);  // dropout as in the first forward
    layer.backward(x, w, dres, *ws_, drop);
    ready(first_layer_group_ + static_cast<int>(i));
  }
  if (stage_.pre_process) {
    if (config_.hidden_dropout > 0)
      apply_dropout(be_, dres, dres, drop, backend::mix64(dropout_seed, 0xE3B0), true);
    use(embedding_group_);
    if (Tensor* dpos = stage_.cp_size() > 1 && embedding_.position() ? &ws_->cp_dwpe : nullptr) {
      be_.zero(*dpos);
      embedding_.backward(be_, dres, acts.tokens, ws_->full_b, dpos);
      add_cp_position_grad();
    } else {
      embedding_.backward(be_, dres, acts.tokens, ws_->full_b);
    }
    ready(embedding_group_);
  } else {
    be_.copy(acts.grad_input, dres);
  }
}

}  // namespace tripod::model
