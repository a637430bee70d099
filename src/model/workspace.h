// Scratch buffers shared by all micro-batches and layers of one GptModel
// (gradients of activations and the logits), sized for the largest
// micro-batch seen. Internal to model/: the stage (gpt_model.cpp) owns one,
// its TransformerLayers work in it.
//
// NOTE [Scratch in the logits buffer]
// The loss head computes the logits in row chunks of at most
// StageConfig::loss_chunk_bytes (see head_chunk_rows) and runs its backward
// at once, inside forward(): the logits buffer is dead outside the head.
// The layers' scratch (ln, dresidual, dln, tmp, dqkv, datt, dfc1) is
// never live during the head (the layers' forward has finished, backward()
// has not started), so on the last stage it lives inside the logits buffer
// when that is large enough, instead of next to it.
#pragma once

#include <algorithm>

#include "backend/ops.h"
#include "config/gpt_config.h"
#include "model/context_parallel.h"
#include "model/stage_config.h"
#include "model/transformer_layer.h"

namespace tripod::model {
using config::GptConfig;

struct Workspace {
  int64_t B = 0, T = 0;
  Tensor ln;             // (N_sp,C) the LayerNorm output in use (NOTE [LayerNorm outputs])
  Tensor dresidual;      // (N_sp,C)
  Tensor dln;            // (N_sp,C)
  Tensor tmp;            // (N_sp,C) attention/MLP output before the residual add
  Tensor full_a;         // (N,C) gathered LayerNorm outputs (sequence parallelism only)
  Tensor full_b;         // (N,C) partial sums of row-parallel linears, gathered gradients
  Tensor dqkv;           // (N, 3*C_tp)
  Tensor datt;           // (N, C_tp)
  Tensor dfc1;           // (N, F1_tp): d pre-GELU, or d [gate | up] under SwiGLU (F1 = 2F)
  Tensor dact;           // (N, F_tp): d silu(gate) * up (SwiGLU only)
  Tensor logits;         // (head_rows, V_tp), last stage only; reused for dlogits
  int64_t head_rows = 0; // rows of one loss-head chunk (N: unchunked)
  Tensor row_max;        // (N)
  Tensor ce_sums;        // (2, N)
  // Recompute: the activations of the layer being recomputed (full: all but
  // `out`; selective: att and lse only, and with FP8 attention its qkv8 and
  // att8). Shapes as LayerActs.
  LayerActs recomputed;
  // Context parallelism (cp > 1): the K/V ring's blocks (model/context_parallel.h),
  // the positions of the local rows (i32 (T): RoPE), and the learned position
  // embedding's local rows and their gradient ((T, C), GPT-2).
  RingBuffers ring;
  A2aBuffers a2a;               // --cp-comm-type a2a (NOTE [Head all-to-all])
  AllGatherBuffers all_gather;  // --cp-comm-type all_gather
  Tensor positions;
  Tensor cp_wpe, cp_dwpe;
  // --qk-layernorm (model/qk_norm.h): the row maps of qkv's heads, and
  // scratch of qkv's size (N * QKV_tp) and of the q and k heads'.
  QkNormRows qk_rows;
  Tensor qk_scratch, qk_dout;

  // The buffers a layer's forward/backward work on: the stored ones, with
  // the workspace standing in for what recompute does not keep (handles
  // only). for_backward: the recomputation in backward writes the layer
  // output to the workspace copy, not over the stored one (the next
  // layer's input).
  LayerActs layer_acts(const LayerActs& stored, Recompute rc, bool for_backward) const {
    LayerActs w;
    if (rc != Recompute::Full) {
      w = stored;
      w.ln1 = ln;  // NOTE [LayerNorm outputs]
      w.ln2 = ln;
      if (rc == Recompute::None) return w;
      w.att = recomputed.att;
      w.lse = recomputed.lse;
      w.fp8_qkv = recomputed.fp8_qkv;
      w.fp8_att = recomputed.fp8_att;
      return w;
    }
    w = recomputed;
    if (!for_backward) w.out = stored.out;
    return w;
  }

  void ensure(backend::Backend& be, int64_t b, int64_t t, const GptConfig& c, const StageConfig& s,
              int64_t padded_vocab) {
    if (b == B && t == T) return;
    *this = Workspace{};  // release the old buffers before allocating new ones
    B = b;
    T = t;
    const int64_t N = b * t, C = c.hidden_size, tp = s.tp_size();
    const int64_t N_sp = s.local_rows(b, t);
    auto act = [&](Shape sh) { return be.empty(sh, s.compute_dtype); };
    auto f32 = [&](Shape sh) { return be.empty(sh, DType::F32); };
    const int64_t C_tp = C / tp, F_tp = c.ffn_hidden_size / tp, es = static_cast<int64_t>(dtype_size(s.compute_dtype));
    const int64_t QKV_tp = c.qkv_width() / tp, F1_tp = c.fc1_width() / tp, dact_n = c.swiglu ? N * F_tp : 0;
    // Layer scratch, in elements: ln, dresidual, dln, tmp, dqkv, datt, dfc1,
    // each starting on a 128-byte boundary (vectorised kernels).
    auto padded = [](int64_t n) { return (n + 63) / 64 * 64; };
    const int64_t scratch =
        4 * padded(N_sp * C) + padded(N * QKV_tp) + padded(N * C_tp) + padded(N * F1_tp) + padded(dact_n);
    Tensor region;  // the logits buffer, or a buffer of the scratch alone
    if (s.post_process) {
      const int64_t V_tp = padded_vocab / tp;
      head_rows = head_chunk_rows(N, V_tp, es, s.loss_chunk_bytes);
      const int64_t logits_n = head_rows * V_tp;
      region = be.empty({std::max(logits_n, scratch)}, s.compute_dtype);
      logits = region.flat(0, {head_rows, V_tp});
      row_max = f32({N});
      ce_sums = f32({2, N});
    } else {
      region = be.empty({scratch}, s.compute_dtype);
    }
    int64_t at = 0;
    auto carve = [&](Shape sh) {
      Tensor t = region.flat(at, sh);
      at += padded(t.numel());
      return t;
    };
    ln = carve({N_sp, C});
    dresidual = carve({N_sp, C});
    dln = carve({N_sp, C});
    tmp = carve({N_sp, C});
    dqkv = carve({b, t, QKV_tp});
    datt = carve({b, t, C_tp});
    dfc1 = carve({N, F1_tp});
    if (c.swiglu) dact = carve({N, F_tp});
    full_a = s.sequence_parallel_active() ? act({N, C}) : Tensor{};
    full_b = act({N, C});
    recomputed = LayerActs{};
    const int64_t NH_tp = c.num_attention_heads / tp;
    if (s.recompute != Recompute::None) {
      recomputed.att = act({b, t, C_tp});
      recomputed.lse = f32({b, NH_tp, t});
      bool fp8_attention = false;  // --fp8-dot-product-attention in a layer of this stage
      for (int64_t i = s.first_layer; i < s.first_layer + s.num_local_layers; ++i)
        fp8_attention |= c.layer_spec(i).fp8_attention;
      if (fp8_attention) {
        recomputed.fp8_qkv = be.empty({b, t, QKV_tp}, DType::E4M3);
        recomputed.fp8_att = be.empty({b, t, C_tp}, DType::E4M3);
      }
    }
    if (s.cp_size() > 1) {
      const int64_t KV_tp = 2 * (c.query_groups() / tp) * c.head_size();
      using config::CpCommType;
      const CpChunks chunks{s.cp_size(), s.cp_rank(), t * s.cp_size()};
      if (s.uses_cp_comm_type(CpCommType::P2p))
        for (Tensor* k : {&ring.kv[0], &ring.kv[1], &ring.dkv[0], &ring.dkv[1], &ring.dkv_block})
          *k = act({b, t, KV_tp});
      if (s.uses_cp_comm_type(CpCommType::AllGather)) {
        all_gather.kv = act({b, t, KV_tp});
        all_gather.dkv = act({b, t, KV_tp});
        all_gather.kv_all = act({s.cp_size() * b * t * KV_tp});
        all_gather.dkv_all = act({s.cp_size() * b * t * KV_tp});
      }
      if (s.uses_cp_comm_type(CpCommType::A2a)) {
        const int64_t P = s.cp_size(), G_tp = c.query_groups() / tp, O_h = NH_tp / P * c.head_size();
        a2a.send = act({b * t * QKV_tp});
        a2a.recv = act({b * t * QKV_tp});
        a2a.att_h = act({b, t * P, O_h});
        a2a.datt_h = act({b, t * P, O_h});
        a2a.qkv = HeadExchange::make(be, chunks, b, {NH_tp, G_tp, G_tp});
        a2a.out = HeadExchange::make(be, chunks, b, {NH_tp});
      }
      Tensor host = Tensor::empty({t}, DType::I32);
      for (int64_t i = 0; i < t; ++i) host.data<int32_t>()[i] = static_cast<int32_t>(chunks.position(i));
      positions = be.empty({t}, DType::I32);
      be.copy(positions, host);
      be.synchronize();
      if (c.learned_positions()) {
        cp_wpe = act({t, C});
        cp_dwpe = be.empty({t, C}, s.compute_dtype == DType::F64 ? DType::F64 : DType::F32);
      }
    }
    if (c.qk_layernorm) {  // model/qk_norm.h
      const int64_t G_tp = c.query_groups() / tp;
      qk_rows = QkNormRows::make(be, N, NH_tp, G_tp);
      qk_scratch = act({N * QKV_tp});
      qk_dout = act({N * (NH_tp + G_tp) * c.head_size()});
    }
    if (s.recompute == Recompute::Full) {
      LayerActs& r = recomputed;
      if (c.qk_layernorm)
        r.qk_norm = QkNormActs::make(be, c, N, NH_tp, c.query_groups() / tp, s.compute_dtype);
      r.ln1 = act({N_sp, C}); r.ln1_mean = f32({N_sp}); r.ln1_rstd = f32({N_sp});
      r.qkv = act({b, t, QKV_tp});
      r.res1 = act({N_sp, C});
      r.ln2 = act({N_sp, C}); r.ln2_mean = f32({N_sp}); r.ln2_rstd = f32({N_sp});
      r.fc1 = act({N, F1_tp}); r.gelu = act({N, F_tp});
      r.out = act({N_sp, C});
      if (c.moe.enabled()) r.moe = std::make_shared<MoeActs>();  // the MoE layer being recomputed
    }
  }
};

}  // namespace tripod::model
