// Implementation of model/moe_layer.h.
#include "model/moe_layer.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.h"
#include "model/tensor_parallel.h"
#include "parallel/tp_regions.h"

namespace tripod::model {

void add_moe_param_specs(std::vector<ParamSpec>& specs, const config::GptConfig& c, int layer,
                         const std::string& prefix) {
  using R = ParamRole;
  const config::LayerSpec s = c.layer_spec(layer);
  const int64_t C = s.hidden_size, E = s.num_experts;
  const ShardDim fc1_shard = s.swiglu ? ColumnParallelLinear::kGluShard : ColumnParallelLinear::kWeightShard;
  // sp: replicated over tp, each rank's gradient from its own tokens (ParamSpec::sequence_parallel).
  auto add = [&](std::string name, Shape shape, ShardDim shard, InitKind init, bool decay, R role, int expert,
                 bool sp) {
    specs.push_back({std::move(name), std::move(shape), shard, init, decay, layer, role, expert});
    specs.back().sequence_parallel = sp;
  };
  const std::string p = prefix + "mlp.";
  add(p + "router.weight", {E, C}, ShardDim::None, InitKind::Normal, true, R::RouterWeight, -1, true);
  if (s.expert_bias)  // no gradient: updated from the step's loads
    add(p + "router.expert_bias", {E}, ShardDim::None, InitKind::Zeros, false, R::RouterExpertBias, -1, false);
  // An expert's MLP. The shared expert: fc1 column-parallel, fc2
  // row-parallel, as the dense MLP. A routed expert: whole, on every tp
  // rank's own tokens (GptModel splits it under expert tensor parallelism).
  auto expert = [&](const std::string& q, int64_t f, int e, R fc1w, R fc1b, R fc2w, R fc2b, bool split) {
    const int64_t f1 = s.swiglu ? 2 * f : f;
    const ShardDim s1 = split ? fc1_shard : ShardDim::None, s2 = split ? RowParallelLinear::kWeightShard : ShardDim::None;
    add(q + "linear_fc1.weight", {f1, C}, s1, InitKind::Normal, true, fc1w, e, !split);
    if (s.bias) add(q + "linear_fc1.bias", {f1}, s1, InitKind::Zeros, false, fc1b, e, !split);
    add(q + "linear_fc2.weight", {C, f}, s2, InitKind::ScaledNormal, true, fc2w, e, !split);
    if (s.bias) add(q + "linear_fc2.bias", {C}, RowParallelLinear::kBiasShard, InitKind::Zeros, false, fc2b, e, !split);
  };
  for (int e = 0; e < static_cast<int>(E); ++e)
    expert(fmt::format("{}experts.local_experts.{}.", p, e), s.moe_ffn_hidden_size, e, R::ExpertFc1Weight,
           R::ExpertFc1Bias, R::ExpertFc2Weight, R::ExpertFc2Bias, false);
  if (s.shared_expert_size > 0) {
    expert(p + "shared_experts.", s.shared_expert_size, -1, R::SharedExpertFc1Weight, R::SharedExpertFc1Bias,
           R::SharedExpertFc2Weight, R::SharedExpertFc2Bias, true);
    if (s.shared_expert_gate)
      add(p + "shared_experts.gate_weight", {1, C}, ShardDim::None, InitKind::Normal, true,
          R::SharedExpertGateWeight, -1, true);
  }
}

size_t MoeActs::bytes() const {
  size_t n = 0;
  for (const Tensor* t : {&x, &x32, &logits, &probs, &indices, &daux, &losses, &row_map, &counts, &xp, &y, &xe, &fc1,
                          &act, &sort_map,
                          &s_fc1, &s_act, &s_out, &gate_logit, &gate, &gate_idx, &ident})
    if (t->defined()) n += t->nbytes();
  return n;
}

MoeLayer::MoeLayer(const config::GptConfig& config, const StageConfig& stage, int64_t layer_number,
                   const MoeParams& params, const TpContext& tp, backend::Backend& be)
    : config_(&config), stage_(&stage), layer_number_(layer_number), params_(params), be_(&be), tp_(tp),
      shared_fc1_(params.shared.fc1_weight, params.shared.fc1_bias, tp),
      shared_fc2_(params.shared.fc2_weight, params.shared.fc2_bias, tp),
      spec_(config.layer_spec(layer_number)) {
  const int tp_size = stage.tp_size();
  TRIPOD_CHECK_HINT(tp_size == 1 || tp.sequence_parallel,
                    "add --sequence-parallel (MoE layers under tensor parallelism route each tp rank's own tokens, "
                    "as Megatron)",
                    "MoE layers (--num-experts) with --tensor-model-parallel-size {} need --sequence-parallel", tp_size);
  TRIPOD_CHECK_HINT(spec_.shared_expert_size % tp_size == 0,
                    "choose a --moe-shared-expert-intermediate-size divisible by --tensor-model-parallel-size",
                    "--moe-shared-expert-intermediate-size {} is not divisible by --tensor-model-parallel-size {}",
                    spec_.shared_expert_size, tp_size);
  const config::MoeConfig& m = config.moe;
  routing_.topk = static_cast<int>(m.router_topk);
  routing_.sigmoid = m.sigmoid();
  routing_.pre_softmax = m.router_pre_softmax;
  routing_.scaling_factor = m.router_topk_scaling_factor;
  stats_.tokens_per_expert.assign(static_cast<size_t>(spec_.num_experts), 0);
}

void MoeLayer::ensure(MoeActs& a, int64_t N) const {
  if (a.N == N && a.logits.defined()) return;
  backend::Backend& be = *be_;
  const config::LayerSpec& s = spec_;
  const int64_t C = s.hidden_size, E = s.num_experts, k = s.router_topk;
  const int64_t tp = stage_->tp_size(), Nt = N * tp;  // the shared expert's rows: all of the tp group's under SP
  const int64_t Fs = s.shared_expert_size / tp, Fs1 = s.swiglu ? 2 * Fs : Fs;
  const DType dt = stage_->compute_dtype;
  MoeActs fresh;  // the pass flags stay, the buffers are made for N
  fresh.with_grad = a.with_grad;
  fresh.recomputing = a.recomputing;
  fresh.aux_loss_scale = a.aux_loss_scale;
  a = std::move(fresh);
  a.N = N;
  a.x = be.empty({N, C}, dt);
  if (dt != DType::F32) a.x32 = be.empty({N, C}, DType::F32);
  a.logits = be.empty({N, E}, DType::F32);
  a.probs = be.empty({N, k}, DType::F32);
  a.indices = be.empty({N, k}, DType::I32);
  a.daux = be.empty({N, E}, DType::F32);
  a.losses = be.empty({2}, DType::F32);
  a.row_map = be.empty({N * k}, DType::I32);
  a.counts = be.empty({E}, DType::I32);
  a.xp = be.empty({N * k, C}, dt);
  a.y = be.empty({N * k, C}, dt);
  if (Fs > 0) {
    a.s_fc1 = be.empty({Nt, Fs1}, dt);
    a.s_act = be.empty({Nt, Fs}, dt);
    a.s_out = be.empty({N, C}, dt);
  }
  if (s.shared_expert_gate) {
    a.gate_logit = be.empty({N, 1}, DType::F32);
    a.gate = be.empty({N, 1}, DType::F32);
    a.gate_idx = be.empty({N, 1}, DType::I32);
    Tensor ident = Tensor::empty({N}, DType::I32);
    for (int64_t n = 0; n < N; ++n) ident.data<int32_t>()[n] = static_cast<int32_t>(n);
    a.ident = be.empty({N}, DType::I32);
    be.copy(a.ident, ident);
  }
}

void MoeLayer::add_f32(Tensor& dx, const Tensor& d32) const {
  if (dx.dtype() == DType::F32) {
    be_->add(dx, dx, d32);
    return;
  }
  Tensor t = be_->empty(dx.shape(), dx.dtype());
  be_->cast(t, d32);
  be_->add(dx, dx, t);
}

// NOTE [MoE under tp, sp and cp]
// As Megatron's MoE layer: under --sequence-parallel each tp rank's MoE
// input is its own N_sp rows, and under context parallelism each cp rank's
// its own chunks of every sequence; the router, the top-k, the dispatch
// over the (folded, config/layout.h NOTE [Expert rank order]) ep group and
// the experts (whole at --expert-tensor-parallel-size 1; split over tp they
// see the tp group's dispatched rows, NOTE [Expert tensor parallelism] in
// moe_experts.cpp) see those tokens only. MoE with tp > 1 needs --sequence-parallel (without it every tp rank
// would route the same tokens). The router, the shared-expert gate and the
// experts (at ep 1; at ep > 1 the experts' gradients are summed over edp
// only, GptModel clears their mark) are replicated over tp and their
// gradients summed over tp (ParamSpec::sequence_parallel), then over dp x
// cp with the rest; the
// shared expert is split by tp as the dense MLP. The capacity
// (--moe-expert-capacity-factor) counts this rank's tokens, as Megatron's.
//
// The load-balancing and z losses are the whole micro-batch's: the router
// logits (N, E) f32 are all-gathered over tp and cp, put back in sequence
// order (a cp rank's rows are its two chunks of every sequence, NOTE
// [Load-balanced chunks]), the loss op runs on them as on one process, and
// each rank keeps its rows of the gradient. Megatron all-reduces the
// tokens per expert over tp x cp instead and scales the local losses: the
// same numbers, here without a second loss kernel. Every tp and cp rank so
// holds the micro-batch's losses, which the metrics average.

void MoeLayer::aux_losses(MoeActs& a, const backend::MoeAuxLoss& al) const {
  backend::Backend& be = *be_;
  const int tp = tp_.active() ? stage_->tp_size() : 1, cp = stage_->cp_size();
  if (tp == 1 && cp == 1) {
    be.zero(a.daux);
    be.moe_aux_loss(&a.daux, a.losses, a.logits, al);
    return;
  }
  const int64_t N = a.N, E = spec_.num_experts, Ncp = N * tp;  // Ncp: this cp rank's tokens
  const int64_t T = config_->seq_length, Tc = T / cp, B = Ncp / Tc;
  TRIPOD_CHECK(B * Tc == Ncp, "MoE layer {}: {} tokens per cp rank are not whole sequences of {} rows", layer_number_,
               Ncp, Tc);
  auto rows = [](const Tensor& t, int64_t at, int64_t n) { return t.narrow(at, n); };
  Tensor cp_logits = tp > 1 ? be.empty({Ncp, E}, DType::F32) : a.logits;
  if (tp > 1) parallel::gather_from_sequence_parallel_region(tp_.group, cp_logits, a.logits);
  Tensor full = cp_logits, gathered;
  if (cp > 1) {  // (cp, B, Tc) as gathered -> (B, cp, Tc): each sequence's rows together
    gathered = be.empty({cp * Ncp, E}, DType::F32);
    Tensor g = gathered.view({cp * Ncp * E});
    stage_->cp->all_gather(g, cp_logits.view({Ncp * E}))->wait();
    full = be.empty({cp * Ncp, E}, DType::F32);
    for (int c = 0; c < cp; ++c)
      for (int64_t b = 0; b < B; ++b) {
        Tensor dst = rows(full, b * T + c * Tc, Tc);
        be.copy(dst, rows(gathered, c * Ncp + b * Tc, Tc));
      }
  }
  Tensor dfull = be.empty(full.shape(), DType::F32);
  be.zero(dfull);
  be.moe_aux_loss(&dfull, a.losses, full, al);
  // This rank's rows: its cp chunks of each sequence, then its tp rows of those.
  Tensor dcp = cp > 1 ? be.empty({Ncp, E}, DType::F32) : dfull;
  if (cp > 1)
    for (int64_t b = 0; b < B; ++b) {
      Tensor dst = rows(dcp, b * Tc, Tc);
      be.copy(dst, rows(dfull, b * T + stage_->cp_rank() * Tc, Tc));
    }
  be.copy(a.daux, rows(dcp, tp_.rank() * N, N));
}

void MoeLayer::forward(const Tensor& x, Tensor& out, MoeActs& a) const {
  backend::Backend& be = *be_;
  const config::MoeConfig& m = config_->moe;
  const MoeParams& P = params_;
  const int64_t N = x.size(0), E = spec_.num_experts;
  const int k = routing_.topk;
  ensure(a, N);
  be.copy(a.x, x);
  const Tensor* xr = &a.x;  // the router's input, f32
  if (a.x32.defined()) {
    be.cast(a.x32, x);
    xr = &a.x32;
  }
  // ---- router ----
  be.matmul_forward(a.logits, *xr, P.router_weight->value, nullptr);
  be.moe_router_topk(a.probs, a.indices, a.logits, P.expert_bias ? &P.expert_bias->value : nullptr, routing_);
  const float coeff = m.balancing_coeff();
  if (a.with_grad && (coeff > 0 || m.z_loss_coeff > 0)) {
    backend::MoeAuxLoss al;
    al.topk = k;
    al.sigmoid = routing_.sigmoid;
    al.seq_length = m.seq_aux_loss() ? config_->seq_length : 0;
    al.aux_coeff = coeff;
    al.z_coeff = m.z_loss_coeff;
    al.grad_scale = a.aux_loss_scale;
    aux_losses(a, al);
  }
  // ---- dispatch: the slots sorted by expert, capacity applied ----
  const int64_t capacity = m.dropless() ? -1 : m.capacity(N);
  be.moe_permute_map(a.row_map, a.counts, a.indices, a.probs, E, capacity, m.token_drop_policy == "probs");
  Tensor counts = Tensor::empty({E}, DType::I32);
  be.copy(counts, a.counts);
  // The step's statistics ride the one wait the dispatch needs (the token
  // counts), so the aux and z losses cost no device synchronization of their own.
  const bool log_losses = a.with_grad && !a.recomputing && (coeff > 0 || m.z_loss_coeff > 0);
  Tensor losses = log_losses ? Tensor::empty({2}, DType::F32) : Tensor();
  if (log_losses) be.copy(losses, a.losses);
  be.synchronize();
  a.tokens_per_expert.assign(static_cast<size_t>(E), 0);
  a.rows = 0;
  for (int64_t e = 0; e < E; ++e) a.rows += (a.tokens_per_expert[e] = counts.data<int32_t>()[e]);
  // ---- dispatch (all-to-all over ep), experts, combine ----
  const int64_t R = a.rows;
  if (R > 0) {
    Tensor xp = a.xp.narrow(0, R);
    be.moe_permute(xp, a.x, a.row_map.narrow(0, R), k);
  }
  plan_dispatch(a);
  const DType dt = x.dtype();
  const int64_t Re = a.expert_rows_total, C = spec_.hidden_size;
  // At ep 1 there is no exchange: the experts read the permuted rows and
  // write the rows the combine reads in place (no copies, and no second
  // copy of the rows kept for the backward).
  const bool local = stage_->ep_size() == 1;
  const int64_t Rx = std::max<int64_t>(Re, 1);
  Tensor xd = local ? a.xp.narrow(0, Rx) : be.empty({Rx, C}, dt), ye = local ? a.y.narrow(0, Rx) : be.empty({Rx, C}, dt);
  if (!local) dispatch(xd, a.xp, a);
  experts_forward(a, xd, ye);
  if (!local) combine(a.y, ye, a);
  if (R > 0) be.moe_unpermute(out, a.y.narrow(0, R), a.row_map.narrow(0, R), a.probs);
  else be.zero(out);
  if (spec_.shared_expert_size > 0) shared_forward(*xr, out, a);
  if (!a.with_grad || a.recomputing) return;
  for (int64_t e = 0; e < E; ++e) stats_.tokens_per_expert[e] += a.tokens_per_expert[e];
  ++stats_.micro_batches;
  if (log_losses) {
    if (coeff > 0) stats_.aux_loss += losses.data<float>()[0] / coeff;  // Megatron logs the loss without its coefficient
    if (m.z_loss_coeff > 0) stats_.z_loss += losses.data<float>()[1] / m.z_loss_coeff;
  }
}

void MoeLayer::backward(Tensor& dx, const Tensor& dout, MoeActs& a) const {
  backend::Backend& be = *be_;
  const config::MoeConfig& m = config_->moe;
  const MoeParams& P = params_;
  const int64_t N = a.N, E = spec_.num_experts, C = spec_.hidden_size, R = a.rows;
  const int k = routing_.topk;
  const Tensor& xr = a.x32.defined() ? a.x32 : a.x;
  Tensor dprobs = be.empty({N, k}, DType::F32), dlogits = be.empty({N, E}, DType::F32);
  // ---- routed experts: combine^T, experts^T, dispatch^T ----
  {
    const int64_t Re = a.expert_rows_total;
    Tensor dy = be.empty({std::max<int64_t>(R, 1), C}, dx.dtype()), dxp = be.empty({std::max<int64_t>(R, 1), C}, dx.dtype());
    const bool local = stage_->ep_size() == 1;  // as forward: no exchange, the rows in place
    const int64_t Rx = std::max<int64_t>(Re, 1);
    Tensor dye = local ? dy.narrow(0, Rx) : be.empty({Rx, C}, dx.dtype());
    Tensor dxe = local ? dxp.narrow(0, Rx) : be.empty({Rx, C}, dx.dtype());
    if (R > 0) {
      Tensor dy_rows = dy.narrow(0, R);
      be.moe_unpermute_backward(dy_rows, dprobs, dout, a.y.narrow(0, R), a.row_map.narrow(0, R), a.probs);
    } else {
      be.zero(dprobs);
    }
    if (!local) dispatch(dye, dy, a);  // the combine's transpose: the same exchange as the dispatch
    experts_backward(a, dye, dxe);
    if (!local) combine(dxp, dxe, a);  // the dispatch's transpose
    if (R > 0) be.moe_permute_backward(dx, dxp.narrow(0, R), a.row_map.narrow(0, R), k);
    else be.zero(dx);
  }
  // ---- router: d probs (and the auxiliary losses' d logits) -> d x, d Wr ----
  be.moe_router_topk_backward(dlogits, dprobs, a.logits, a.indices, routing_);
  if (m.balancing_coeff() > 0 || m.z_loss_coeff > 0) be.add(dlogits, dlogits, a.daux);
  Tensor dxr = be.empty({N, C}, DType::F32);
  be.matmul_backward(&dxr, &P.router_weight->grad, nullptr, dlogits, xr, P.router_weight->value);
  add_f32(dx, dxr);
  if (spec_.shared_expert_size > 0) shared_backward(dx, dout, xr, a);
}

// ---- the shared expert: the dense MLP's tensor-parallel split ----
// fc1 column-parallel (the SP all-gather of x before it), fc2 row-parallel
// (the SP reduce-scatter after it, then its bias), as the dense MLP; at tp
// 1 the same matmuls as a routed expert. The gate sigmoid(x g) is per
// token on this rank's rows.

void MoeLayer::shared_forward(const Tensor& xr, Tensor& out, MoeActs& a) const {
  backend::Backend& be = *be_;
  const MoeParams& P = params_;
  const bool split = tp_.active();
  const int64_t N = a.N, C = spec_.hidden_size;
  Tensor x_full = split ? be.empty({a.s_fc1.size(0), C}, a.x.dtype()) : Tensor();
  shared_fc1_.forward(be, a.s_fc1, a.x, x_full);
  if (spec_.swiglu) be.swiglu_forward(a.s_act, a.s_fc1);
  else be.gelu_forward(a.s_act, a.s_fc1);
  if (split) {
    Tensor partial = be.empty({a.s_act.size(0), C}, a.x.dtype());
    shared_fc2_.forward(be, a.s_act, partial, a.s_out);  // reduce-scattered into s_out, + bias
  } else {
    shared_fc2_.forward(be, a.s_act, a.s_out, a.s_out);
  }
  if (spec_.shared_expert_gate) {  // out += sigmoid(x g) * shared(x): the gate as a 1-expert sigmoid router
    be.matmul_forward(a.gate_logit, xr, P.shared_gate->value, nullptr);
    backend::MoeRouting g;
    g.sigmoid = true;
    be.moe_router_topk(a.gate, a.gate_idx, a.gate_logit, nullptr, g);
    Tensor gated = be.empty({N, C}, out.dtype());
    be.moe_unpermute(gated, a.s_out, a.ident, a.gate);
    be.add(out, out, gated);
  } else {
    be.add(out, out, a.s_out);
  }
}

void MoeLayer::shared_backward(Tensor& dx, const Tensor& dout, const Tensor& xr, MoeActs& a) const {
  backend::Backend& be = *be_;
  const MoeParams& P = params_;
  const int64_t N = a.N, C = spec_.hidden_size, Nt = a.s_fc1.size(0);
  Tensor ds = be.empty({N, C}, dx.dtype());
  const Tensor* dshared = &dout;
  if (spec_.shared_expert_gate) {
    Tensor dgate = be.empty({N, 1}, DType::F32), dgate_logit = be.empty({N, 1}, DType::F32);
    be.moe_unpermute_backward(ds, dgate, dout, a.s_out, a.ident, a.gate);
    backend::MoeRouting g;
    g.sigmoid = true;
    be.moe_router_topk_backward(dgate_logit, dgate, a.gate_logit, a.gate_idx, g);
    Tensor dxr = be.empty({N, C}, DType::F32);
    be.matmul_backward(&dxr, &P.shared_gate->grad, nullptr, dgate_logit, xr, P.shared_gate->value);
    add_f32(dx, dxr);
    dshared = &ds;
  }
  Tensor dact = be.empty(a.s_act.shape(), a.s_act.dtype()), dfc1 = be.empty(a.s_fc1.shape(), a.s_fc1.dtype());
  Tensor full = tp_.active() ? be.empty({Nt, C}, dx.dtype()) : Tensor();
  shared_fc2_.backward(be, dact, *dshared, a.s_act, full);  // dy all-gathered under SP
  if (spec_.swiglu) be.swiglu_backward(dfc1, a.s_fc1, dact);
  else be.gelu_backward(dfc1, a.s_fc1, dact);
  Tensor x_full = tp_.active() ? be.empty({Nt, C}, a.x.dtype()) : Tensor();
  const Tensor& xin = shared_fc1_.input(a.x, x_full);  // gathered again under SP, as Megatron
  Tensor dfull = be.empty({Nt, C}, dx.dtype()), dshard = tp_.active() ? be.empty({N, C}, dx.dtype()) : Tensor();
  const Tensor& dxs = shared_fc1_.backward(be, dfc1, xin, dfull, dshard);  // reduce-scattered under SP
  be.add(dx, dx, dxs);
}

// ---- the token dispatcher (Megatron's MoEAlltoAllTokenDispatcher) ----
// With ep ranks each rank runs experts [ep_rank El, (ep_rank + 1) El), El =
// E / ep. The rows this rank routed are sorted by global expert, so the rows
// for rank d are one contiguous chunk: an all-to-all sends them (after the
// counts per expert, so each rank knows what it receives), and the received
// rows [from rank 0: its rows for my experts 0..El-1 | from rank 1: ... ]
// are sorted by local expert (sort_map) so each expert's rows are
// contiguous. The combine is the inverse: unsort, all-to-all back. At ep 1
// both are plain copies.

void MoeLayer::plan_dispatch(MoeActs& a) const {
  backend::Backend& be = *be_;
  const int ep = stage_->ep_size(), me = stage_->ep_rank();
  const int64_t E = spec_.num_experts, El = E / ep;
  a.first_local_expert = me * El;
  a.send_rows.assign(static_cast<size_t>(ep), 0);
  a.recv_rows.assign(static_cast<size_t>(ep), 0);
  if (ep == 1) {
    a.expert_rows = a.tokens_per_expert;
    a.expert_rows_total = a.rows;
    a.send_rows[0] = a.recv_rows[0] = a.rows;
    return;
  }
  // The counts per expert: rank d gets this rank's counts of d's experts.
  Tensor send_h = Tensor::empty({E}, DType::I64), recv_h = Tensor::empty({E}, DType::I64);
  for (int64_t e = 0; e < E; ++e) send_h.data<int64_t>()[e] = a.tokens_per_expert[static_cast<size_t>(e)];
  Tensor send_d = be.empty({E}, DType::I64), recv_d = be.empty({E}, DType::I64);
  be.copy(send_d, send_h);
  std::vector<int64_t> counts(static_cast<size_t>(ep), El);
  stage_->ep->all_to_all_v(recv_d, send_d, counts, counts)->wait();
  be.copy(recv_h, recv_d);
  be.synchronize();
  std::copy_n(send_h.data<int64_t>() + me * El, El, recv_h.data<int64_t>() + me * El);  // the chunk kept
  const int64_t* split = recv_h.data<int64_t>();  // split[s El + el]: rows from rank s for local expert el
  a.expert_rows.assign(static_cast<size_t>(El), 0);
  for (int s = 0; s < ep; ++s)
    for (int64_t el = 0; el < El; ++el) {
      a.send_rows[s] += a.tokens_per_expert[static_cast<size_t>(s * El + el)];
      a.recv_rows[s] += split[s * El + el];
      a.expert_rows[el] += split[s * El + el];
    }
  a.expert_rows_total = 0;
  for (int64_t c : a.expert_rows) a.expert_rows_total += c;
  // sort_map[r]: the received row that row r of the expert order holds.
  Tensor map_h = Tensor::empty({std::max<int64_t>(a.expert_rows_total, 1)}, DType::I32);
  std::vector<int64_t> from_at(static_cast<size_t>(ep), 0);
  for (int s = 1; s < ep; ++s) from_at[s] = from_at[s - 1] + a.recv_rows[s - 1];
  int64_t r = 0;
  for (int64_t el = 0; el < El; ++el)
    for (int s = 0; s < ep; ++s) {
      int64_t at = from_at[s];
      for (int64_t j = 0; j < el; ++j) at += split[s * El + j];
      for (int64_t i = 0; i < split[s * El + el]; ++i) map_h.data<int32_t>()[r++] = static_cast<int32_t>(at + i);
    }
  a.sort_map = be.empty(map_h.shape(), DType::I32);
  be.copy(a.sort_map, map_h);
}

void MoeLayer::exchange(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_rows,
                        const std::vector<int64_t>& recv_rows) const {
  const int me = stage_->ep_rank(), ep = stage_->ep_size();
  const int64_t C = spec_.hidden_size;
  std::vector<int64_t> sc(static_cast<size_t>(ep)), rc(static_cast<size_t>(ep));
  int64_t send_at = 0, recv_at = 0;
  for (int s = 0; s < ep; ++s) {
    sc[s] = send_rows[s] * C;
    rc[s] = recv_rows[s] * C;
    if (s < me) send_at += send_rows[s], recv_at += recv_rows[s];
  }
  stage_->ep->all_to_all_v(out, in, sc, rc)->wait();
  if (send_rows[me] > 0) {  // the rows this rank keeps
    Tensor dst = out.narrow(recv_at, recv_rows[me]);
    be_->copy(dst, in.narrow(send_at, send_rows[me]));
  }
}

void MoeLayer::dispatch(Tensor& dst, const Tensor& src, const MoeActs& a) const {
  backend::Backend& be = *be_;
  TRIPOD_CHECK(stage_->ep_size() > 1, "MoE dispatch: at ep 1 the experts read the permuted rows in place");
  const int64_t Re = a.expert_rows_total;
  Tensor received = be.empty({std::max<int64_t>(Re, 1), spec_.hidden_size}, src.dtype());
  exchange(received, src, a.send_rows, a.recv_rows);
  if (Re > 0) {
    Tensor d = dst.narrow(0, Re);
    be.moe_permute(d, received.narrow(0, Re), a.sort_map.narrow(0, Re), 1);
  }
}

void MoeLayer::combine(Tensor& dst, const Tensor& src, const MoeActs& a) const {
  backend::Backend& be = *be_;
  TRIPOD_CHECK(stage_->ep_size() > 1, "MoE combine: at ep 1 the experts write the combined rows in place");
  const int64_t Re = a.expert_rows_total;
  Tensor unsorted = be.empty({std::max<int64_t>(Re, 1), spec_.hidden_size}, src.dtype());
  if (Re > 0) {
    Tensor u = unsorted.narrow(0, Re);
    be.moe_permute_backward(u, src.narrow(0, Re), a.sort_map.narrow(0, Re), 1);  // row sort_map[r] <- row r
  }
  exchange(dst, unsorted, a.recv_rows, a.send_rows);
}

MoeStats MoeLayer::take_stats() const {
  MoeStats s = stats_;
  stats_ = MoeStats{};
  stats_.tokens_per_expert.assign(static_cast<size_t>(spec_.num_experts), 0);
  return s;
}

void MoeLayer::update_expert_bias(const std::vector<int64_t>& tokens) const {
  Param* b = params_.expert_bias;
  if (!b) return;
  const int64_t E = spec_.num_experts;
  TRIPOD_CHECK(static_cast<int64_t>(tokens.size()) == E, "expert bias update: {} counts for {} experts", tokens.size(),
               E);
  Tensor h = Tensor::empty({E}, DType::F32);
  be_->copy(h, b->value);
  be_->synchronize();
  double total = 0;
  for (int64_t t : tokens) total += static_cast<double>(t);
  const double mean = total / static_cast<double>(E);
  const float rate = config_->moe.router_bias_update_rate;
  for (int64_t e = 0; e < E; ++e) {
    const double off = mean - static_cast<double>(tokens[e]);
    h.data<float>()[e] += off > 0 ? rate : off < 0 ? -rate : 0.f;  // sign(mean - count) * rate
  }
  be_->copy(b->value, h);
  if (b->compute.raw() != b->value.raw()) be_->cast(b->compute, b->value);
  be_->synchronize();
}

}  // namespace tripod::model
