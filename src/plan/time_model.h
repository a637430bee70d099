// Time model of a layout: predicted seconds per training step, split into
// compute, TP communication, pipeline bubble, PP point-to-point and DP
// gradient synchronisation. Deliberately simple (no overlap of
// communication with compute), so the ranking is explainable; the absolute
// numbers are estimates, the order is what `tripod plan` relies on.
//
// References:
//  - FLOPs per token 6N + 6LTC (Kaplan et al. 2020; PaLM appendix B), x 4/3
//    for full recompute (one more forward), + 2LTC for selective (the
//    attention core's forward again).
//  - Megatron-LM (Shoeybi et al. 2019): 2 all-reduces of (s, b, h) per layer
//    in forward and 2 in backward under TP; with SP all-gather +
//    reduce-scatter of the same total volume (Korthikanti et al. 2022).
//  - Narayanan et al. 2021: bubble fraction (P - 1) / (v m).
//  - nccl-tests doc/PERFORMANCE.md: all-reduce moves 2(n-1)/n x S bytes per
//    rank, all-gather / reduce-scatter (n-1)/n x S; "bandwidth" below is bus
//    bandwidth in that sense.
#pragma once

#include <string>

#include "plan/memory_model.h"
#include "plan/op_profile.h"

namespace tripod::plan {

struct Machine {
  int nnodes = 1;
  int gpus_per_node = 8;
  double gpu_memory_gb = 80;        // GiB per GPU
  double peak_tflops = 989;         // dense bf16/fp16 TFLOP/s per GPU (H100 SXM)
  double intra_node_bw_gbs = 300;   // bus bandwidth inside a node (NVLink), GB/s
  double inter_node_bw_gbs = 40;    // bus bandwidth per GPU across nodes (IB/RoCE), GB/s
  // The all-to-all's bus bandwidth (MoE token exchange) inside / across
  // nodes, measured by `tripod bench comm --ops all_to_all --links-out`;
  // 0: the bus bandwidths above.
  double intra_node_a2a_gbs = 0, inter_node_a2a_gbs = 0;
  double intra_node_latency_us = 10;  // per collective
  double inter_node_latency_us = 25;
  double assumed_mfu = 0.45;        // fraction of peak large matmuls reach (see matmul_efficiency)
  // FP8 GEMM rate over the bf16 one (--fp8-format: the FP8 layers' linears;
  // measured 1.44-1.89 on one H200 at GPT-2 1.5B and Llama 3 8B layer
  // shapes, bench/RESULTS.md). Used by the FLOP-based compute term; op
  // profiles time the FP8 linears themselves (--calibrate measures them;
  // a profile without them takes the bf16 fit at kFp8GemmSpeedup).
  double fp8_gemm_speedup = kFp8GemmSpeedup;
  // The same under --fp8-recipe blockwise (block-scaled GEMMs and casts;
  // see kFp8BlockGemmSpeedup): estimate_time takes this one for a model
  // whose GptConfig::fp8 is blockwise.
  double fp8_block_gemm_speedup = kFp8BlockGemmSpeedup;
  // Per-op times (measured or shipped, plan/op_profile.h); null: the
  // compute term is FLOPs / (peak x assumed_mfu x matmul_efficiency).
  const OpProfile* ops = nullptr;
  int world() const { return nnodes * gpus_per_node; }
};

struct TimeBreakdown {
  double compute = 0;   // s: the micro-batches' ops (op times) or FLOPs / (peak x MFU), incl. recompute
  double tp_comm = 0;   // s: TP all-reduces (or SP gather/scatter)
  double bubble = 0;    // s: pipeline fill and drain
  double pp_comm = 0;   // s: activations sent between stages
  double dp_comm = 0;   // s: gradient all-reduce (or reduce-scatter + all-gather)
  double dp_param_gather = 0;  // s: of dp_comm, ZeRO-3's parameter all-gathers (zero3_param_gather_seconds)
  double optimizer = 0; // s: AdamW over this rank's parameters (op times only; 0 under assumed MFU)
  double cp_comm = 0;   // s: the context-parallel K/V ring's transfers not hidden behind the attention
  double ep_comm = 0;   // s: the MoE token dispatch and combine all-to-alls (moe_all_to_all_seconds)
  bool compute_from_op_times = false;  // compute summed from Machine::ops
  bool tp_crosses_nodes = false, dp_crosses_nodes = false, pp_crosses_nodes = false, cp_crosses_nodes = false;
  bool ep_crosses_nodes = false;
  double total() const { return compute + tp_comm + bubble + pp_comm + dp_comm + optimizer + cp_comm + ep_comm; }
};

// Which groups leave a node, with Megatron's rank order (tp fastest, then
// dp, then pp: "tp-dp-pp"): a tp group is ranks [k tp, (k+1) tp), a dp group
// a stride-tp run over tp x dp consecutive ranks.
bool group_crosses_nodes(int span, int gpus_per_node);

// Seconds to all-reduce `bytes` over n ranks at bus bandwidth `bw_gbs`.
double all_reduce_seconds(double bytes, int n, double bw_gbs, double latency_us);

// ZeRO-3 (zero_stage 3): the parameter all-gathers of one step, before
// every layer's forward and again before its backward, per micro-batch, in
// the compute dtype (p = 2 bytes for bf16/fp16, 4 for fp32; NOTE
// [Compute-dtype all-gather]), over one distributed-optimizer instance
// (n = dp x cp / N ranks): with P the stage's parameters, L its layers,
// m micro-batches,
//   2 m ((n - 1)/n P p / bw + L latency)
// bw and latency inside a node when tp x n ranks fit one, else across.
// 0 for other strategies or n = 1.
double zero3_param_gather_seconds(const GptConfig& m, const Layout& l, const Machine& machine);

// Expert parallelism (l.ep > 1; docs/moe.md): the all-to-alls of one step
// on the busiest stage. Each MoE layer exchanges, per micro-batch, its
// N k permuted rows of C in the compute dtype (N = b s/cp tokens, top-k)
// four times: dispatch and combine in forward, their gradients in backward
// (six under full recompute, which dispatches and combines again); of each
// exchange (ep-1)/ep leaves the rank. With L_moe the stage's MoE layers and
// m micro-batches:
//   m L_moe x exchanges x ((ep-1)/ep N k C p / bw + latency)
// bw and latency inside a node when the tp x ep ranks of an ep group fit
// one (ep peers are consecutive data-parallel ranks), else across; bw is
// the measured all-to-all bus bandwidth (Machine::*_a2a_gbs; nccl-tests'
// all-to-all bus bandwidth is (n-1)/n of the bytes per rank over the time)
// where a link file gave one, else the link's bus bandwidth. 0 at ep 1.
double moe_all_to_all_seconds(const GptConfig& m, const Layout& l, const Machine& machine);

// Parameters of pipeline stage `stage` on one rank with expert parallelism:
// params_on_stage less the (ep-1)/ep of the routed experts other ep ranks
// hold (expert_params_on_stage). Equal to params_on_stage at ep 1.
int64_t rank_params_on_stage(const GptConfig& m, const Layout& l, int stage);

// Fraction of --assumed-mfu that a layout's GEMMs reach: smaller matmuls
// run further from peak. A saturating guess, not a measurement:
// M/(M + 256) for the M = b s/cp rows of a micro-batch, times n/(n + 128) for
// the n = h/t columns a TP rank keeps (half speed at 256 rows or 128 columns).
// It is what makes a larger micro-batch and a smaller TP win when memory allows.
double matmul_efficiency(const GptConfig& m, const Layout& l);

// FLOPs per token of the FP8 layers' linear GEMMs (forward and backward,
// 6 C (Q + C + F1 + F) per FP8 layer; 4 C (Q + C + F1 + F) under
// --no-fp8-wgrad, whose weight-gradient GEMMs, a third of the 6, run in
// the compute dtype; 0 without --fp8-format).
double fp8_linear_flops_per_token(const GptConfig& m);

TimeBreakdown estimate_time(const GptConfig& m, const Layout& l, const Machine& machine);

}  // namespace tripod::plan
