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
  Tensor dfc1, dgelu;    // (N, F_tp)
  Tensor logits;         // (N, V_tp), last stage only; reused for dlogits
  Tensor row_max;        // (N)
  Tensor ce_sums;        // (2, N)

  void ensure(backend::Backend& be, int64_t b, int64_t t, const GptConfig& c, const StageConfig& s,
              int64_t padded_vocab) {
    if (b == B && t == T) return;
    B = b;
    T = t;
    const int64_t N = b * t, C = c.hidden_size, tp = s.tp_size;
    const int64_t N_sp = (s.sequence_parallel && tp > 1) ? N / tp : N;
    auto f32 = [&](Shape sh) { return be.empty(sh, DType::F32); };
    dresidual = f32({N_sp, C});
    dln = f32({N_sp, C});
    tmp = f32({N_sp, C});
    full_a = f32({N, C});
    full_b = f32({N, C});
    dqkv = f32({b, t, 3 * C / tp});
    datt = f32({b, t, C / tp});
    dfc1 = f32({N, c.ffn_hidden_size / tp});
    dgelu = f32({N, c.ffn_hidden_size / tp});
    if (s.post_process) {
      logits = f32({N, padded_vocab / tp});
      row_max = f32({N});
      ce_sums = f32({2, N});
    }
  }
};

}  // namespace tripod::model
