// The mixture-of-experts MLP half of a transformer layer (Megatron-core's
// MoELayer: router -> token dispatcher -> experts -> combine, plus the
// shared expert), with explicit forward and backward:
//   logits = x Wr^T                        (N, E), f32 (the router always computes in f32)
//   probs, experts = top-k(score(logits))  (N, k) (backend MoeRouting: softmax before or
//                                          after the top-k, or sigmoid + expert bias)
//   y[n] = sum_j probs[n, j] expert_{idx[n, j]}(x[n])
//        + [sigmoid(x[n] g)] shared(x[n])  (Qwen2-MoE's gated shared expert)
// where an expert is the dense MLP of width Fe: fc2(act(fc1(x))), act GELU,
// or SwiGLU with --swiglu. The load-balancing loss (aux_loss per
// micro-batch or seq_aux_loss per sequence) and the z-loss add their
// gradient to d logits (MoeAuxLoss's grad_scale carries the loss's
// normalisation, so they enter the objective as Megatron's
// MoEAuxLossAutoScaler does: averaged over micro-batches and dp ranks).
//
// Dispatch: the slots (token, choice) are sorted by expert (backend
// moe_permute_map; with --moe-expert-capacity-factor each expert keeps at
// most its capacity), the token rows gathered in that order (moe_permute),
// each local expert runs on its contiguous rows (one loop over the experts
// with their token counts; an expert with no tokens is skipped), and the
// rows are combined back per token in slot order (moe_unpermute), so the
// sums do not depend on how the rows were grouped.
//
// Tensor, sequence and context parallelism (NOTE [MoE under tp, sp and cp]
// in moe_layer.cpp): the layer sees this rank's tokens only (N = N_sp
// under --sequence-parallel, the local rows under context parallelism);
// the experts run unsplit (--expert-tensor-parallel-size 1) or split over
// the tp group (--expert-tensor-parallel-size = tp: NOTE [Expert tensor
// parallelism] in moe_experts.cpp), the shared expert is split by tp as the
// dense MLP.
//
// Relates to: model/transformer_layer.h (whose MLP half this replaces),
// config/moe_config.h (the options), backend/ops.h (the MoE ops),
// docs/moe.md. Reference: Megatron-core transformer/moe/ (moe_layer.py,
// router.py, token_dispatcher.py, experts.py, shared_experts.py).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "config/gpt_config.h"
#include "model/layer_params.h"
#include "model/stage_config.h"
#include "model/tensor_parallel.h"

namespace tripod::model {

// Appends the parameters of MoE layer `layer` (names under prefix
// "decoder.layers.<l>."): router, expert bias, every expert (global
// index), shared expert and gate, in that order. The experts are listed
// whole (GptModel splits them over tp under --expert-tensor-parallel-size
// = tp); the shared expert is split by tp, as the dense MLP. The router, the shared-expert gate and the experts are marked
// ParamSpec::sequence_parallel: each tp rank computes them on its own
// tokens, so their gradients are summed over tp.
void add_moe_param_specs(std::vector<ParamSpec>& specs, const config::GptConfig& c, int layer,
                         const std::string& prefix);

// What one MoE layer keeps for one micro-batch (N tokens), and how the pass
// runs. Shapes: R <= N k the kept slots (rows), Fe1 = fc1's width of an
// expert (2Fe under SwiGLU), Fs1 the shared expert's.
struct MoeActs {
  // Set by the caller before forward.
  bool with_grad = false;      // training: the auxiliary losses and their gradient
  bool recomputing = false;    // a recompute pass: the statistics are not counted again
  float aux_loss_scale = 0.f;  // d objective / d (the whole micro-batch's aux + z losses)
  int64_t N = 0, rows = 0;     // this rank's tokens; kept slots R
  std::vector<int64_t> tokens_per_expert;  // (E) host, after capacity dropping
  Tensor x;                    // (N, C) the layer's input (ln2), compute dtype
  Tensor x32;                  // (N, C) f32 copy for the router (only when the compute dtype is not f32)
  Tensor logits, probs, indices;  // (N, E) f32, (N, k) f32, (N, k) i32
  Tensor daux;                 // (N, E) f32: grad_scale d(aux + z)/d logits
  Tensor losses;               // (2) f32: [aux, z] of this micro-batch
  Tensor row_map, counts;      // (N k) i32, (E) i32
  Tensor xp, y;                // (N k, C) in the slot order sorted by expert; the first R rows used
  // The expert side, after the dispatch (at ep 1 the same rows): Re rows
  // sorted by this rank's experts, expert_rows[el] each.
  int64_t first_local_expert = 0, expert_rows_total = 0;
  std::vector<int64_t> expert_rows;           // (E / ep)
  std::vector<int64_t> send_rows, recv_rows;  // (ep) rows to and from each ep rank
  Tensor sort_map;                            // (Re) i32: received row of each expert-order row
  // Expert tensor parallelism (etp = tp > 1): the tp group's dispatched
  // rows gathered, each tp rank's padded to etp_rmax; etp_rows[t El + el]
  // the rows tp rank t has for local expert el. At etp 1: etp_rows =
  // expert_rows, etp_rmax = Re.
  std::vector<int64_t> etp_rows;
  int64_t etp_rmax = 0;
  Tensor xe, fc1, act;                        // (etp Rmax, C), (etp Rmax, Fe1 / etp), (etp Rmax, Fe / etp)
  Tensor s_fc1, s_act, s_out;  // shared expert: (N tp, Fs1 / tp), (N tp, Fs / tp), (N, C) (tp: under SP)
  Tensor gate_logit, gate, gate_idx, ident;  // gate: (N, 1) f32, (N, 1) f32, (N, 1) i32; ident (N) i32 = 0..N-1
  size_t bytes() const;
};

// What the layer counted over the micro-batches of training forwards since
// the last take_stats() (the metrics, and the expert-bias update).
struct MoeStats {
  std::vector<int64_t> tokens_per_expert;  // (E) over this rank's tokens (its N_sp rows under SP and cp)
  double aux_loss = 0, z_loss = 0;         // sums over micro-batches (without the coefficients' 0 guard)
  int64_t micro_batches = 0;
};

class MoeLayer {
 public:
  // spec: this layer's (config.layer_spec(layer_number)); params and stage
  // outlive the layer. tp: the stage's tensor-parallel group (the shared
  // expert's split and the sequence-parallel gathers).
  MoeLayer(const config::GptConfig& config, const StageConfig& stage, int64_t layer_number, const MoeParams& params,
           const TpContext& tp, backend::Backend& be);

  // x (N, C) -> out (N, C) (overwrite), N this rank's tokens; fills a.
  void forward(const Tensor& x, Tensor& out, MoeActs& a) const;
  // dout (N, C) -> dx (N, C) (overwrite); accumulates the parameter gradients.
  void backward(Tensor& dx, const Tensor& dout, MoeActs& a) const;

  int64_t layer_number() const { return layer_number_; }
  int64_t num_experts() const { return spec_.num_experts; }  // E (all experts, not only this rank's)
  const MoeParams& params() const { return params_; }
  // The statistics since the last call, and a reset.
  MoeStats take_stats() const;
  // DeepSeek-V3's update from the tokens per expert summed over every rank
  // that holds a copy of this router (tp x cp x dp): bias += rate sign(mean - count).
  void update_expert_bias(const std::vector<int64_t>& tokens_per_expert) const;

 private:
  void ensure(MoeActs& a, int64_t N) const;
  // One expert on its rows (fc2's bias added when fc2_bias; under expert
  // tensor parallelism fc1 and fc2 are this tp rank's pieces).
  void expert_forward(const ExpertParams& p, const Tensor& x, Tensor& fc1, Tensor& act, Tensor& y,
                      bool fc2_bias) const;
  void expert_backward(const ExpertParams& p, Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& fc1,
                       const Tensor& act) const;
  // This rank's local experts on the dispatched rows xd (Re, sorted by
  // local expert) -> yd (Re); under expert tensor parallelism over the whole
  // tp group's rows (moe_experts.cpp, NOTE [Expert tensor parallelism]).
  void experts_forward(MoeActs& a, const Tensor& xd, Tensor& yd) const;
  void experts_backward(MoeActs& a, const Tensor& dyd, Tensor& dxd) const;
  // --moe-grouped-gemm (moe_experts.cpp, NOTE [Grouped expert GEMMs, the
  // model's side]): the groups of the experts' rows in expert order, each tp
  // block's padding a group without weight.
  struct ExpertGroups {
    std::vector<int64_t> rows;
    std::vector<const Tensor*> fc1, fc2;  // the compute weights (null: padding)
    std::vector<Param*> fc1_param, fc2_param;
  };
  bool grouped_gemm() const;
  ExpertGroups expert_groups(const MoeActs& a) const;
  // fn(first row, rows) for each tp block with rows.
  void for_each_block(const MoeActs& a, const std::function<void(int64_t, int64_t)>& fn) const;
  void grouped_experts_backward(MoeActs& a, const Tensor& dy, Tensor& dx) const;
  void weight_grads(const std::vector<int64_t>& rows, const std::vector<Param*>& params, const Tensor& dout,
                    const Tensor& inp) const;
  void add_f32(Tensor& dx, const Tensor& d32) const;  // dx += d32 (cast to dx's dtype first)
  // The auxiliary losses over the whole micro-batch's router logits
  // (gathered over tp under SP and over cp), their gradient's rows of this
  // rank's tokens into a.daux.
  void aux_losses(MoeActs& a, const backend::MoeAuxLoss& al) const;
  void shared_forward(const Tensor& xr, Tensor& out, MoeActs& a) const;
  void shared_backward(Tensor& dx, const Tensor& dout, const Tensor& xr, MoeActs& a) const;
  // The token dispatcher (moe_layer.cpp): the counts exchange and the
  // expert order, then rows from the local slot order to the expert order
  // (dispatch) and back (combine).
  void plan_dispatch(MoeActs& a) const;
  void exchange(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_rows,
                const std::vector<int64_t>& recv_rows) const;
  void dispatch(Tensor& dst, const Tensor& src, const MoeActs& a) const;
  void combine(Tensor& dst, const Tensor& src, const MoeActs& a) const;

  const config::GptConfig* config_;
  const StageConfig* stage_;
  int64_t layer_number_;
  MoeParams params_;
  backend::Backend* be_;
  TpContext tp_;
  ColumnParallelLinear shared_fc1_;  // the shared expert (null weights without one)
  RowParallelLinear shared_fc2_;
  config::LayerSpec spec_;
  backend::MoeRouting routing_;
  mutable MoeStats stats_;
};

}  // namespace tripod::model
