// The routed experts of model/moe_layer.h on the rows the token dispatcher
// gave this rank, unsplit or split over the tp group.
#include <algorithm>
#include <functional>

#include "base/error.h"
#include "model/moe_layer.h"
#include "parallel/tp_regions.h"

namespace tripod::model {

// NOTE [Expert tensor parallelism]
// --expert-tensor-parallel-size = tp (> 1), as Megatron's token dispatchers
// with an expert-tp group: after the dispatch over ep each tp rank holds
// Re_t rows sorted by local expert (its own routed tokens, or the ep peers'
// for its experts). The tp group all-gathers them (each rank's rows padded
// to the group's largest Re, so one fixed-size all-gather serves; the
// counts per expert are all-gathered first), every rank runs its piece of
// each expert on every gathered row (fc1 column-parallel: its Fe / tp
// columns, SwiGLU's gate and up halves alike; fc2 row-parallel: a partial
// (rows, C) sum), and the partial outputs are reduce-scattered back, each
// rank keeping the sum for its own rows. fc2's bias is whole on every rank:
// added once (by tp rank 0's partial), its gradient the gathered rows' sum,
// the same on every tp rank. The backward pass is the transpose: the
// output gradients all-gathered, the input gradients reduce-scattered.
// Every expert parameter's gradient so already covers the whole tp group's
// tokens: nothing is summed over tp (GptModel clears their
// sequence_parallel mark); they are summed over edp (= world / (etp ep pp))
// with the other expert gradients. An expert without rows on any tp rank
// does nothing; when no tp rank has any row the exchange is skipped (every
// rank knows it from the gathered counts).

void MoeLayer::expert_forward(const ExpertParams& p, const Tensor& x, Tensor& fc1, Tensor& act, Tensor& y,
                              bool fc2_bias) const {
  backend::Backend& be = *be_;
  be.matmul_forward(fc1, x, p.fc1_weight->compute, p.fc1_bias ? &p.fc1_bias->compute : nullptr);
  if (spec_.swiglu) be.swiglu_forward(act, fc1);
  else be.gelu_forward(act, fc1);
  be.matmul_forward(y, act, p.fc2_weight->compute, fc2_bias && p.fc2_bias ? &p.fc2_bias->compute : nullptr);
}

void MoeLayer::expert_backward(const ExpertParams& p, Tensor& dx, const Tensor& dy, const Tensor& x,
                               const Tensor& fc1, const Tensor& act) const {
  backend::Backend& be = *be_;
  Tensor dact = be.empty(act.shape(), act.dtype()), dfc1 = be.empty(fc1.shape(), fc1.dtype());
  be.matmul_backward(&dact, &p.fc2_weight->grad, p.fc2_bias ? &p.fc2_bias->grad : nullptr, dy, act,
                     p.fc2_weight->compute);
  if (spec_.swiglu) be.swiglu_backward(dfc1, fc1, dact);
  else be.gelu_backward(dfc1, fc1, dact);
  be.matmul_backward(&dx, &p.fc1_weight->grad, p.fc1_bias ? &p.fc1_bias->grad : nullptr, dfc1, x,
                     p.fc1_weight->compute);
}

namespace {

// dst's first n rows = src's first n rows.
void copy_first(backend::Backend& be, Tensor& dst, const Tensor& src, int64_t n) {
  if (n == 0) return;
  Tensor d = dst.narrow(0, n);
  be.copy(d, src.narrow(0, n));
}

}  // namespace

// NOTE [Grouped expert GEMMs, the model's side] (--moe-grouped-gemm, as
// Megatron's GroupedMLP against its SequentialMLP loop): fc1 of every
// local expert in one grouped GEMM, the activation once over each tp
// block's rows, fc2 in one grouped GEMM; backward the data gradients
// grouped and the weight gradients one GEMM per expert (they accumulate
// into f32). The groups are the experts' rows in the order the loop takes
// them, each tp block's padding a group without weight, so every expert
// computes what the loop computes: on the CPU both give the same bits.
// Experts with biases take the loop.
bool MoeLayer::grouped_gemm() const {
  if (!config_->moe.grouped_gemm) return false;
  for (const ExpertParams& p : params_.experts)
    if (p.fc1_bias || p.fc2_bias) return false;
  return true;
}

MoeLayer::ExpertGroups MoeLayer::expert_groups(const MoeActs& a) const {
  const int T = stage_->etp_size();
  const int64_t El = static_cast<int64_t>(a.expert_rows.size());
  ExpertGroups g;
  for (int t = 0; t < T; ++t) {
    int64_t n = 0;
    for (int64_t el = 0; el < El; ++el) {
      const ExpertParams& p = params_.experts[static_cast<size_t>(a.first_local_expert + el - params_.first_expert)];
      const int64_t c = a.etp_rows[static_cast<size_t>(t * El + el)];
      g.rows.push_back(c);
      g.fc1.push_back(&p.fc1_weight->compute);
      g.fc2.push_back(&p.fc2_weight->compute);
      g.fc1_param.push_back(p.fc1_weight);
      g.fc2_param.push_back(p.fc2_weight);
      n += c;
    }
    if (T > 1 && t + 1 < T) {  // the block's padding up to the next block
      g.rows.push_back(a.etp_rmax - n);
      g.fc1.push_back(nullptr);
      g.fc2.push_back(nullptr);
      g.fc1_param.push_back(nullptr);
      g.fc2_param.push_back(nullptr);
    }
  }
  return g;
}

void MoeLayer::for_each_block(const MoeActs& a, const std::function<void(int64_t, int64_t)>& fn) const {
  const int T = stage_->etp_size();
  const int64_t El = static_cast<int64_t>(a.expert_rows.size());
  for (int t = 0; t < T; ++t) {
    int64_t n = 0;
    for (int64_t el = 0; el < El; ++el) n += a.etp_rows[static_cast<size_t>(t * El + el)];
    if (n > 0) fn(t * a.etp_rmax, n);
  }
}

// Each expert's weight gradient from its rows: grad += dout^T inp (one
// f32-accumulating GEMM per expert).
void MoeLayer::weight_grads(const std::vector<int64_t>& rows, const std::vector<Param*>& params, const Tensor& dout,
                            const Tensor& inp) const {
  int64_t row = 0;
  for (size_t i = 0; i < rows.size(); row += rows[i], ++i)
    if (params[i] && rows[i] > 0)
      be_->matmul_backward(nullptr, &params[i]->grad, nullptr, dout.narrow(row, rows[i]), inp.narrow(row, rows[i]),
                           params[i]->compute);
}

void MoeLayer::grouped_experts_backward(MoeActs& a, const Tensor& dy, Tensor& dx) const {
  backend::Backend& be = *be_;
  const ExpertGroups g = expert_groups(a);
  Tensor dfc1 = be.empty(a.fc1.shape(), a.fc1.dtype());
  {
    Tensor dact = be.empty(a.act.shape(), a.act.dtype());
    be.grouped_matmul_backward_data(dact, dy, g.fc2, g.rows);
    weight_grads(g.rows, g.fc2_param, dy, a.act);
    for_each_block(a, [&](int64_t r, int64_t n) {
      Tensor d = dfc1.narrow(r, n);
      if (spec_.swiglu) be.swiglu_backward(d, a.fc1.narrow(r, n), dact.narrow(r, n));
      else be.gelu_backward(d, a.fc1.narrow(r, n), dact.narrow(r, n));
    });
  }
  be.grouped_matmul_backward_data(dx, dfc1, g.fc1, g.rows);
  weight_grads(g.rows, g.fc1_param, dfc1, a.xe);
}

void MoeLayer::experts_forward(MoeActs& a, const Tensor& xd, Tensor& yd) const {
  backend::Backend& be = *be_;
  const MoeParams& P = params_;
  const int T = stage_->etp_size();
  const int64_t El = static_cast<int64_t>(a.expert_rows.size()), Re = a.expert_rows_total, C = spec_.hidden_size;
  const int64_t Fe = spec_.moe_ffn_hidden_size / T, Fe1 = spec_.swiglu ? 2 * Fe : Fe;
  const DType dt = xd.dtype();
  if (T == 1) {
    a.etp_rows = a.expert_rows;
    a.etp_rmax = Re;
    a.xe = xd;
  } else {  // the tp group's rows per local expert, then the rows themselves
    Tensor send_h = Tensor::empty({El}, DType::I64), recv_h = Tensor::empty({T * El}, DType::I64);
    std::copy(a.expert_rows.begin(), a.expert_rows.end(), send_h.data<int64_t>());
    Tensor send_d = be.empty({El}, DType::I64), recv_d = be.empty({T * El}, DType::I64);
    be.copy(send_d, send_h);
    tp_.group->all_gather(recv_d, send_d)->wait();
    be.copy(recv_h, recv_d);
    be.synchronize();
    a.etp_rows.assign(recv_h.data<int64_t>(), recv_h.data<int64_t>() + T * El);
    a.etp_rmax = 0;
    for (int t = 0; t < T; ++t) {
      int64_t n = 0;
      for (int64_t el = 0; el < El; ++el) n += a.etp_rows[static_cast<size_t>(t * El + el)];
      a.etp_rmax = std::max(a.etp_rmax, n);
    }
    a.xe = be.empty({std::max<int64_t>(T * a.etp_rmax, 1), C}, dt);
    if (a.etp_rmax > 0) {
      Tensor pad = be.empty({a.etp_rmax, C}, dt);
      be.zero(pad);
      copy_first(be, pad, xd, Re);
      Tensor full = a.xe.narrow(0, T * a.etp_rmax);
      parallel::gather_from_sequence_parallel_region(tp_.group, full, pad);
    }
  }
  const int64_t Rall = T * a.etp_rmax;
  a.fc1 = be.empty({std::max<int64_t>(Rall, 1), Fe1}, dt);
  a.act = be.empty({std::max<int64_t>(Rall, 1), Fe}, dt);
  Tensor y = T == 1 ? yd : be.empty({std::max<int64_t>(Rall, 1), C}, dt);
  if (T > 1) be.zero(y);  // the padding rows take part in the reduce-scatter
  const bool fc2_bias = stage_->tp_rank() == 0 || T == 1;  // one partial sum carries the whole bias
  if (grouped_gemm()) {
    const ExpertGroups g = expert_groups(a);
    be.grouped_matmul_forward(a.fc1, a.xe, g.fc1, g.rows);
    for_each_block(a, [&](int64_t row, int64_t n) {
      Tensor act = a.act.narrow(row, n);
      if (spec_.swiglu) be.swiglu_forward(act, a.fc1.narrow(row, n));
      else be.gelu_forward(act, a.fc1.narrow(row, n));
    });
    be.grouped_matmul_forward(y, a.act, g.fc2, g.rows);
  } else {
  for (int t = 0; t < T; ++t) {
    int64_t row = t * a.etp_rmax;
    for (int64_t el = 0; el < El; ++el) {  // each local expert on its contiguous rows
      const int64_t c = a.etp_rows[static_cast<size_t>(t * El + el)];
      if (c == 0) continue;  // an expert without tokens does no work
      Tensor fc1 = a.fc1.narrow(row, c), act = a.act.narrow(row, c), yr = y.narrow(row, c);
      expert_forward(P.experts[static_cast<size_t>(a.first_local_expert + el - P.first_expert)], a.xe.narrow(row, c),
                     fc1, act, yr, fc2_bias);
      row += c;
    }
  }
  }
  if (T > 1 && a.etp_rmax > 0) {
    Tensor mine = be.empty({a.etp_rmax, C}, dt);
    parallel::reduce_scatter_to_sequence_parallel_region(tp_.group, mine, y.narrow(0, Rall));
    copy_first(be, yd, mine, Re);
  }
}

void MoeLayer::experts_backward(MoeActs& a, const Tensor& dyd, Tensor& dxd) const {
  backend::Backend& be = *be_;
  const MoeParams& P = params_;
  const int T = stage_->etp_size();
  const int64_t El = static_cast<int64_t>(a.expert_rows.size()), Re = a.expert_rows_total, C = spec_.hidden_size;
  const int64_t Rall = T * a.etp_rmax;
  const DType dt = dyd.dtype();
  if (T > 1 && Rall == 0) return;
  Tensor dy = dyd, dx = dxd;
  if (T > 1) {
    Tensor pad = be.empty({a.etp_rmax, C}, dt);
    be.zero(pad);
    copy_first(be, pad, dyd, Re);
    dy = be.empty({Rall, C}, dt);
    parallel::gather_from_sequence_parallel_region(tp_.group, dy, pad);
    dx = be.empty({Rall, C}, dt);
    be.zero(dx);
  }
  if (grouped_gemm()) {
    grouped_experts_backward(a, dy, dx);
  } else {
  for (int t = 0; t < T; ++t) {
    int64_t row = t * a.etp_rmax;
    for (int64_t el = 0; el < El; ++el) {
      const int64_t c = a.etp_rows[static_cast<size_t>(t * El + el)];
      if (c == 0) continue;
      Tensor dx_rows = dx.narrow(row, c);
      expert_backward(P.experts[static_cast<size_t>(a.first_local_expert + el - P.first_expert)], dx_rows,
                      dy.narrow(row, c), a.xe.narrow(row, c), a.fc1.narrow(row, c), a.act.narrow(row, c));
      row += c;
    }
  }
  }
  if (T > 1) {
    Tensor mine = be.empty({a.etp_rmax, C}, dt);
    parallel::reduce_scatter_to_sequence_parallel_region(tp_.group, mine, dx);
    copy_first(be, dxd, mine, Re);
  }
}

}  // namespace tripod::model
