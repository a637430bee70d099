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

double matmul_efficiency(const GptConfig& m, const Layout& l) {
  const double rows = double(l.micro_batch * m.seq_length);      // M of every GEMM
  const double cols = double(m.hidden_size) / l.tp;              // the TP-sharded width
  return rows / (rows + 256.0) * cols / (cols + 128.0);
}

TimeBreakdown estimate_time(const GptConfig& m, const Layout& l, const Machine& mc) {
  TimeBreakdown t;
  const double s = double(m.seq_length), h = double(m.hidden_size), L = double(m.num_layers);
  const double b = double(l.micro_batch), mb = double(l.num_microbatches());
  const double act_bytes = l.dtype == DType::F32 ? 4.0 : 2.0;
  t.tp_crosses_nodes = group_crosses_nodes(l.tp, mc.gpus_per_node);
  t.dp_crosses_nodes = group_crosses_nodes(l.tp * l.dp, mc.gpus_per_node);
  t.pp_crosses_nodes = mc.world() > mc.gpus_per_node && l.pp > 1 &&
                       group_crosses_nodes(l.tp * l.dp * l.pp, mc.gpus_per_node);
  auto bw = [&](bool crosses) { return crosses ? mc.inter_node_bw_gbs : mc.intra_node_bw_gbs; };
  auto lat = [&](bool crosses) { return crosses ? mc.inter_node_latency_us : mc.intra_node_latency_us; };

  // ---- compute: one micro-batch on one stage, one tp rank ----
  double flops_token = m.flops_per_token();
  if (l.recompute == Recompute::Full) flops_token *= 4.0 / 3.0;
  if (l.recompute == Recompute::Selective) flops_token += 2.0 * L * s * h;
  const double flops_mb_stage = flops_token * s * b / (l.pp * l.tp);
  double t_compute_mb = flops_mb_stage / (mc.peak_tflops * 1e12 * mc.assumed_mfu * matmul_efficiency(m, l));
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
  if (l.dp > 1) {
    const double params = double(params_on_stage(m, l.tp, l.pp, 0));
    const double n = l.dp, frac = (n - 1) / n;
    const double B = bw(t.dp_crosses_nodes) * 1e9;
    if (l.zero_stage >= 2) {
      // ZeRO-2/-3 (docs/zero.md): a reduce-scatter of the fp32 gradients per
      // micro-batch; ZeRO-2 all-gathers the updated params once (bf16), ZeRO-3
      // gathers every layer's fp32 params before its forward and again
      // before its backward, per micro-batch. Two latencies per layer and
      // pass are charged as the calls.
      const double layers = double(m.num_layers) / l.pp;
      const double gathers = l.zero_stage == 3 ? 2.0 * mb * params * 4.0 : params * act_bytes;
      t.dp_comm = frac * (mb * params * 4.0 + gathers) / B +
                  (l.zero_stage == 3 ? 3.0 : 1.0) * mb * layers * lat(t.dp_crosses_nodes) * 1e-6;
    } else if (l.distributed_optimizer)
      t.dp_comm = frac * params * (4.0 + act_bytes) / B + 2 * lat(t.dp_crosses_nodes) * 1e-6;
    else
      t.dp_comm = all_reduce_seconds(params * 4.0, l.dp, bw(t.dp_crosses_nodes), lat(t.dp_crosses_nodes));
  }
  return t;
}

}  // namespace tripod::plan
