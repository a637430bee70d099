// Scratch buffers shared by all micro-batches and layers of one GptModel
// (gradients of activations and the logits), sized for the largest
// micro-batch seen. Internal to model/.
#pragma once

#include "backend/ops.h"
#include "model/gpt_config.h"
#include "model/gpt_model.h"

namespace tripod::model {

struct GptModel::Workspace {
  int64_t B = 0, T = 0;
  Tensor dresidual;      // (N_sp,C)
  Tensor dln;            // (N_sp,C)
  Tensor tmp;            // (N_sp,C) attention/MLP output before the residual add
  Tensor full_a, full_b; // (N,C) gathered LayerNorm outputs / partial sums of row-parallel linears
  Tensor dqkv;           // (N, 3*C_tp)
  Tensor datt;           // (N, C_tp)
  Tensor dfc1;           // (N, F_tp): d pre-GELU
  Tensor logits;         // (N, V_tp), last stage only; reused for dlogits
  Tensor row_max;        // (N)
  Tensor ce_sums;        // (2, N)
  // Recompute: the activations of the layer being recomputed (full: all but
  // `out`; selective: att and lse only). Shapes as LayerActs.
  LayerActs recomputed;

  void ensure(backend::Backend& be, int64_t b, int64_t t, const GptConfig& c, const StageConfig& s,
              int64_t padded_vocab) {
    if (b == B && t == T) return;
    B = b;
    T = t;
    const int64_t N = b * t, C = c.hidden_size, tp = s.tp_size;
    const int64_t N_sp = (s.sequence_parallel && tp > 1) ? N / tp : N;
    auto act = [&](Shape sh) { return be.empty(sh, s.compute_dtype); };
    auto f32 = [&](Shape sh) { return be.empty(sh, DType::F32); };
    dresidual = act({N_sp, C});
    dln = act({N_sp, C});
    tmp = act({N_sp, C});
    full_a = act({N, C});
    full_b = act({N, C});
    dqkv = act({b, t, 3 * C / tp});
    datt = act({b, t, C / tp});
    dfc1 = act({N, c.ffn_hidden_size / tp});
    if (s.post_process) {
      logits = act({N, padded_vocab / tp});
      row_max = f32({N});
      ce_sums = f32({2, N});
    }
    recomputed = LayerActs{};
    const int64_t C_tp = C / tp, F_tp = c.ffn_hidden_size / tp, NH_tp = c.num_attention_heads / tp;
    if (s.recompute != Recompute::None) {
      recomputed.att = act({b, t, C_tp});
      recomputed.lse = f32({b, NH_tp, t});
    }
    if (s.recompute == Recompute::Full) {
      LayerActs& r = recomputed;
      r.ln1 = act({N_sp, C}); r.ln1_mean = f32({N_sp}); r.ln1_rstd = f32({N_sp});
      r.qkv = act({b, t, 3 * C_tp});
      r.res1 = act({N_sp, C});
      r.ln2 = act({N_sp, C}); r.ln2_mean = f32({N_sp}); r.ln2_rstd = f32({N_sp});
      r.fc1 = act({N, F_tp}); r.gelu = act({N, F_tp});
      r.out = act({N_sp, C});
    }
  }
};

}  // namespace tripod::model
