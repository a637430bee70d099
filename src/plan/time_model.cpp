// Time model of a layout. See plan/time_model.h for the sources and
// docs/plan.md for the derivation.
#include "plan/time_model.h"

#include <algorithm>

namespace tripod::plan {

bool group_crosses_nodes(int span, int gpus_per_node) {
  // A block of `span` consecutive ranks starting at a multiple of span stays
  // inside one node iff it divides the node (span <= gpus_per_node and
  // gpus_per_node % span == 0).
  return span > gpus_per_node || gpus_per_node % span != 0;
}

double all_reduce_seconds(double bytes, int n, double bw_gbs, double latency_us) {
  if (n <= 1) return 0.0;
  return 2.0 * (n - 1) / n * bytes / (bw_gbs * 1e9) + latency_us * 1e-6;
}

double zero3_param_gather_seconds(const GptConfig& m, const Layout& l, const Machine& mc) {
  if (l.zero_stage != 3 || l.shard_ranks() <= 1) return 0.0;
  const double params = double(params_on_stage(m, l.tp, l.pp, 0)), n = l.shard_ranks();
  const double p = l.dtype == DType::F32 ? 4.0 : 2.0;  // NOTE [Compute-dtype all-gather]
  const bool crosses = group_crosses_nodes(l.tp * l.shard_ranks(), mc.gpus_per_node);
  const double bw = crosses ? mc.inter_node_bw_gbs : mc.intra_node_bw_gbs;
  const double lat = crosses ? mc.inter_node_latency_us : mc.intra_node_latency_us;
  const double layers = double(m.num_layers) / l.pp, mb = double(l.num_microbatches());
  return 2.0 * mb * ((n - 1) / n * params * p / (bw * 1e9) + layers * lat * 1e-6);
}

double moe_all_to_all_seconds(const GptConfig& m, const Layout& l, const Machine& mc) {
  if (l.ep <= 1) return 0.0;
  // The stage with the most MoE layers (ceil(L / pp) layers a stage).
  const int64_t layers = (m.num_layers + l.pp - 1) / l.pp, C = m.hidden_size;
  int64_t moe_layers = 0, k = 0;
  for (int s = 0; s < l.pp; ++s) {
    int64_t n = 0;
    for (int64_t i = int64_t(s) * layers; i < std::min(int64_t(s + 1) * layers, m.num_layers); ++i) {
      const config::LayerSpec ls = m.layer_spec(i);
      if (ls.moe()) ++n, k = ls.router_topk;
    }
    moe_layers = std::max(moe_layers, n);
  }
  if (moe_layers == 0) return 0.0;
  const double p = l.dtype == DType::F32 ? 4.0 : 2.0, ep = l.ep;
  const double rows = double(l.micro_batch) * double(m.seq_length / l.cp) * double(k);
  const bool crosses = group_crosses_nodes(l.tp * l.ep, mc.gpus_per_node);
  const double a2a = crosses ? mc.inter_node_a2a_gbs : mc.intra_node_a2a_gbs;
  const double bw = (a2a > 0 ? a2a : crosses ? mc.inter_node_bw_gbs : mc.intra_node_bw_gbs) * 1e9;
  const double lat = (crosses ? mc.inter_node_latency_us : mc.intra_node_latency_us) * 1e-6;
  const double exchanges = l.recompute == Recompute::Full ? 6.0 : 4.0;
  return double(l.num_microbatches()) * double(moe_layers) * exchanges *
         ((ep - 1.0) / ep * rows * double(C) * p / bw + lat);
}

int64_t rank_params_on_stage(const GptConfig& m, const Layout& l, int stage) {
  const int64_t n = params_on_stage(m, l.tp, l.pp, stage);
  if (l.ep <= 1) return n;
  const int64_t experts = expert_params_on_stage(m, l.tp, l.pp, stage);
  return n - experts + experts / l.ep;
}

double matmul_efficiency(const GptConfig& m, const Layout& l) {
  const double rows = double(l.micro_batch * (m.seq_length / l.cp));  // M of every GEMM
  const double cols = double(m.hidden_size) / l.tp;              // the TP-sharded width
  return rows / (rows + 256.0) * cols / (cols + 128.0);
}

double fp8_linear_flops_per_token(const GptConfig& m) {
  if (!m.fp8.enabled()) return 0;
  int64_t n = 0;
  for (int64_t i = 0; i < m.num_layers; ++i) n += m.layer_spec(i).fp8 ? 1 : 0;
  const double C = double(m.hidden_size), Q = double(m.qkv_width()), F1 = double(m.fc1_width());
  // Forward 2, dgrad 2, wgrad 2 FLOPs per weight per token; --no-fp8-wgrad
  // runs the wgrad in the compute dtype (at the bf16 rate).
  const double per_weight = m.fp8.fp8_wgrad() ? 6.0 : 4.0;
  return double(n) * per_weight * C * (Q + C + F1 + double(m.ffn_hidden_size));
}

TimeBreakdown estimate_time(const GptConfig& full, const Layout& l, const Machine& mc) {
  TimeBreakdown t;
  // Context parallelism: each rank runs s/cp rows of every sequence (the
  // attention load-balanced across the ring), so per rank everything below
  // is the local sequence's; the ring's transfers are added at the end.
  const GptConfig m = local_sequence(full, l.cp);
  const double s = double(m.seq_length), h = double(m.hidden_size), L = double(m.num_layers);
  const double b = double(l.micro_batch), mb = double(l.num_microbatches());
  const double act_bytes = l.dtype == DType::F32 ? 4.0 : 2.0;
  t.tp_crosses_nodes = group_crosses_nodes(l.tp, mc.gpus_per_node);
  t.dp_crosses_nodes = group_crosses_nodes(l.tp * l.cp * l.dp, mc.gpus_per_node);
  t.pp_crosses_nodes = mc.world() > mc.gpus_per_node && l.pp > 1 &&
                       group_crosses_nodes(l.tp * l.cp * l.dp * l.pp, mc.gpus_per_node);
  t.cp_crosses_nodes = l.cp > 1 && group_crosses_nodes(l.tp * l.cp, mc.gpus_per_node);
  auto bw = [&](bool crosses) { return crosses ? mc.inter_node_bw_gbs : mc.intra_node_bw_gbs; };
  auto lat = [&](bool crosses) { return crosses ? mc.inter_node_latency_us : mc.intra_node_latency_us; };

  // ---- compute: one micro-batch on one stage, one tp rank ----
  // A token attends to its whole causal context: the FLOPs per token are the
  // full sequence's (FP8 GEMM FLOPs do not depend on the sequence).
  double flops_token = full.flops_per_token(), fp8_token = fp8_linear_flops_per_token(full);
  // Full recompute runs the forward again: 2 FLOPs per weight per token more,
  // of the FP8 linears' 6 (4 under --no-fp8-wgrad, whose wgrad is not FP8).
  if (l.recompute == Recompute::Full) flops_token *= 4.0 / 3.0, fp8_token *= full.fp8.fp8_wgrad() ? 4.0 / 3.0 : 1.5;
  if (l.recompute == Recompute::Selective) flops_token += 2.0 * L * double(full.seq_length) * h;
  // FP8 GEMM FLOPs count as bf16 ones at 1 / fp8_gemm_speedup of the time
  // (1 / fp8_block_gemm_speedup under --fp8-recipe blockwise).
  const double fp8_gain = full.fp8.blockwise() ? mc.fp8_block_gemm_speedup : mc.fp8_gemm_speedup;
  flops_token -= fp8_token * (1.0 - 1.0 / fp8_gain);
  // --fp8-dot-product-attention: of the 6 s h attention FLOPs per token and
  // layer, the forward's 2 (again under either recompute) and the backward's
  // 4 run on cuDNN's FP8 attention in the FP8 layers, at its own gains.
  if (full.fp8.dot_product_attention) {
    double n = 0;
    for (int64_t i = 0; i < full.num_layers; ++i) n += full.layer_spec(i).fp8_attention ? 1 : 0;
    const double fwd_runs = l.recompute == Recompute::None ? 1.0 : 2.0, per_layer = double(full.seq_length) * h;
    flops_token -= n * per_layer * (2.0 * fwd_runs * (1.0 - 1.0 / kFp8AttentionFwdSpeedup) +
                                    4.0 * (1.0 - 1.0 / kFp8AttentionBwdSpeedup));
  }
  const double flops_mb_stage = flops_token * s * b / (l.pp * l.tp);
  double t_compute_mb = flops_mb_stage / (mc.peak_tflops * 1e12 * mc.assumed_mfu * matmul_efficiency(full, l));
  if (mc.ops) {
    // The sum of the ops one micro-batch runs on the busiest stage, each
    // measured or fitted (plan/op_profile.h).
    bool ok = true;
    const double t_ops = mc.ops->seconds_of(micro_batch_ops(m, l), &ok);
    const double t_opt = mc.ops->seconds_of(step_ops(m, l), &ok);
    if (ok) {
      t_compute_mb = t_ops;
      t.optimizer = t_opt;
      t.compute_from_op_times = true;
    }
  }

  // ---- TP: 4 all-reduces of (s, b, h) per layer per micro-batch (2 fwd, 2 bwd),
  // 6 with full recompute (the forward runs twice) ----
  double t_tp_mb = 0;
  if (l.tp > 1) {
    const double per_layer = l.recompute == Recompute::Full ? 6.0 : 4.0;
    const double layers_stage = L / l.pp;
    t_tp_mb = layers_stage * per_layer *
              all_reduce_seconds(s * b * h * act_bytes, l.tp, bw(t.tp_crosses_nodes), lat(t.tp_crosses_nodes));
  }
  const double t_mb = t_compute_mb + t_tp_mb;
  t.compute = mb * t_compute_mb;
  t.tp_comm = mb * t_tp_mb;
  // ---- pipeline: bubble (P-1)/(v m) of the ideal time; one send forward and
  // one backward of (s, b, h) per micro-batch per chunk boundary ----
  if (l.pp > 1) {
    t.bubble = double(l.pp - 1) / l.vpp * t_mb;
    const double msg = s * b * h * act_bytes / (l.sp() ? l.tp : 1);
    t.pp_comm = 2.0 * mb * l.vpp *
                (msg / (bw(t.pp_crosses_nodes) * 1e9) + lat(t.pp_crosses_nodes) * 1e-6);
  }
  // ---- DP: fp32 gradients all-reduced, or reduce-scattered (fp32) and the
  // updated params all-gathered (bf16) with the distributed optimizer ----
  if (l.dp * l.cp > 1) {  // gradients are reduced over dp x cp
    // With expert parallelism a rank reduces its E/ep experts' gradients
    // (over the expert-data-parallel ranks) and the dense ones.
    const double params = double(rank_params_on_stage(m, l, 0));
    // Sharded state splits over one distributed-optimizer instance (dp x cp
    // / N consecutive dp ranks: tp x that many global ranks); the instances
    // then all-reduce their gradient shards once per step, across nodes
    // when the instances are nodes.
    const bool sharded = l.zero_stage >= 2 || l.distributed_optimizer;
    const int N = sharded ? std::max(1, l.dist_opt_instances) : 1;
    const double n = sharded ? l.shard_ranks() : l.dp * l.cp, frac = (n - 1) / n;
    const bool shard_crosses = N > 1 ? group_crosses_nodes(l.tp * l.shard_ranks(), mc.gpus_per_node)
                                     : t.dp_crosses_nodes;
    const double B = bw(shard_crosses) * 1e9;
    t.dp_param_gather = zero3_param_gather_seconds(m, l, mc);
    if (l.zero_stage >= 2) {
      // ZeRO-2/-3 (docs/zero.md): a reduce-scatter of the fp32 gradients per
      // layer and micro-batch (a latency each); ZeRO-2 all-gathers the
      // updated params once (bf16), ZeRO-3 every layer's compute copy before
      // its forward and again before its backward (zero3_param_gather_seconds).
      const double layers = double(m.num_layers) / l.pp;
      const double gathers = l.zero_stage == 3 ? 0.0 : params * act_bytes;
      t.dp_comm = frac * (mb * params * 4.0 + gathers) / B + t.dp_param_gather +
                  mb * layers * lat(shard_crosses) * 1e-6;
    } else if (l.distributed_optimizer)
      t.dp_comm = frac * params * (4.0 + act_bytes) / B + 2 * lat(shard_crosses) * 1e-6;
    if (sharded && N > 1)
      t.dp_comm += all_reduce_seconds(params * 4.0 / n, N, bw(t.dp_crosses_nodes), lat(t.dp_crosses_nodes));
    if (!sharded)
      t.dp_comm = all_reduce_seconds(params * 4.0, l.dp * l.cp, bw(t.dp_crosses_nodes), lat(t.dp_crosses_nodes));
  }
  // ---- CP: per layer and micro-batch the forward passes cp-1 K/V blocks
  // (b, s/cp, 2 G/t HS) around the ring, the backward cp-1 again plus cp
  // dK/dV accumulators. Each hop is posted before the attention of the
  // block in hand (model/context_parallel.h), so only what a hop takes
  // beyond one block's attention (1/cp of the layer's, 4bs^2h/t forward
  // and twice that backward over the whole sequence, causal) is exposed;
  // the last dK/dV hop follows the last block and is not hidden. ----
  // --cp-comm-type a2a (NOTE [Head all-to-all]): per layer and micro-batch
  // the all-to-alls move qkv and out forward, out, d out and d qkv
  // backward (selective recompute: out once more; full: qkv and out), each
  // (b, s/cp) rows of which (cp-1)/cp leave the rank, nothing overlapped.
  // all_gather: cp-1 K/V blocks in forward, again in backward, and cp-1
  // dK/dV blocks reduce-scattered, not overlapped either.
  if (l.cp > 1 && l.cp_comm != config::CpCommType::P2p) {
    const double cp = l.cp, lat_s = lat(t.cp_crosses_nodes) * 1e-6, B = bw(t.cp_crosses_nodes) * 1e9;
    double per_layer = 0;
    if (l.cp_comm == config::CpCommType::A2a) {
      const double qkv = b * s * double(m.qkv_width() / l.tp) * act_bytes;
      const double out = b * s * double(m.hidden_size / l.tp) * act_bytes;
      double n_qkv = 2, n_out = 3, calls = 5;
      if (l.recompute == Recompute::Selective) n_out += 1, calls += 1;
      if (l.recompute == Recompute::Full) n_qkv += 1, n_out += 1, calls += 2;
      per_layer = (n_qkv * qkv + n_out * out) * (cp - 1) / cp / B + calls * (cp - 1) * lat_s;
    } else {
      const double kv = b * s * 2.0 * double(m.query_groups() / l.tp) * double(m.head_size()) * act_bytes;
      const double calls = l.recompute == Recompute::None ? 3 : 4;  // recompute gathers once more
      per_layer = calls * ((cp - 1) * kv / B + lat_s);
    }
    t.cp_comm = mb * (L / l.pp) * per_layer;
  } else if (l.cp > 1) {
    const double S = double(full.seq_length), cp = l.cp;
    const double kv = b * s * 2.0 * double(m.query_groups() / l.tp) * double(m.head_size()) * act_bytes;
    const double hop = kv / (bw(t.cp_crosses_nodes) * 1e9) + lat(t.cp_crosses_nodes) * 1e-6;
    const double rate = mc.peak_tflops * 1e12 * mc.assumed_mfu;
    const double att_fwd = 2.0 * b * S * S * h / l.tp / cp / rate, att_bwd = 2.0 * att_fwd;  // per rank, per layer
    const double per_layer = (cp - 1) * std::max(0.0, hop - att_fwd / cp) +
                             (cp - 1) * std::max(0.0, 2.0 * hop - att_bwd / cp) + hop;
    t.cp_comm = mb * (L / l.pp) * per_layer;
  }
  t.ep_crosses_nodes = l.ep > 1 && group_crosses_nodes(l.tp * l.ep, mc.gpus_per_node);
  t.ep_comm = moe_all_to_all_seconds(full, l, mc);
  return t;
}

}  // namespace tripod::plan
