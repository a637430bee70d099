// Reference kernels of the CPU backend: plain loops over raw pointers, one
// template per op, instantiated for float and double (double is the
// reference the CUDA kernels and the f32 path are checked against).
// Names match backend/cuda. Shapes are given at the top of each function in
// the .cpp files; N = B*T rows.
#pragma once

#include <cstdint>
#include <type_traits>

#include "tensor/dtype.h"

namespace tripod::backend::cpu {

// Statistics type: f32, or f64 for the f64 reference.
template <typename T>
using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                       int64_t Tn, int64_t C, int64_t vocab_start, int64_t V_tp);
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B,
                        int64_t Tn, int64_t C, int64_t vocab_start, int64_t V_tp);

template <typename T>
void layernorm_forward(T* out, stat_t<T>* mean, stat_t<T>* rstd, const T* inp, const T* w, const T* b,
                       int64_t N, int64_t C, float eps);
template <typename T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                        const stat_t<T>* mean, const stat_t<T>* rstd, int64_t N, int64_t C,
                        T* out = nullptr, const T* b = nullptr);

template <typename T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int64_t N, int64_t C,
                    int64_t OC);
template <typename T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w,
                     int64_t N, int64_t C, int64_t OC);

template <typename T> void gelu_forward(T* out, const T* inp, int64_t n);
template <typename T> void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n);

// Causal attention, multi-head (G == NH) or grouped-query (NH % G == 0):
// qkv (B,T,(NH+2G)*HS) = [Q | K | V], out (B,T,NH*HS), lse (B,NH,T).
template <typename T>
void attention_forward(T* out, stat_t<T>* lse, const T* qkv, int64_t B, int64_t Tn, int64_t NH,
                       int64_t G, int64_t HS);
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const stat_t<T>* lse,
                        int64_t B, int64_t Tn, int64_t NH, int64_t G, int64_t HS);

// Block attention (attention_block.cpp): Q rows [q_start, +q_len) of qkv
// (B,Tq,(NH+2G)*HS) against K/V rows [kv_start, +kv_len) of kv (B,Tk,2G*HS).
struct BlockWindow {
  int64_t q_start, q_len, kv_start, kv_len;
  bool causal;
};
template <typename T>
void attention_kv_copy(T* dst, const T* src, int64_t B, int64_t Tn, int64_t NH, int64_t G, int64_t HS,
                       bool from_qkv);
template <typename T>
void attention_block_forward(T* out, stat_t<T>* lse, const T* qkv, const T* kv, int64_t B, int64_t Tq,
                             int64_t Tk, int64_t NH, int64_t G, int64_t HS, const BlockWindow& w,
                             bool accumulate);
template <typename T>
void attention_block_backward(T* dqkv, T* dkv, const T* dout, const T* qkv, const T* kv, const T* out,
                              const stat_t<T>* lse, int64_t B, int64_t Tq, int64_t Tk, int64_t NH, int64_t G,
                              int64_t HS, const BlockWindow& w);

template <typename T>
void rmsnorm_forward(T* out, stat_t<T>* rstd, const T* inp, const T* w, int64_t N, int64_t C, float eps);
template <typename T>
void rmsnorm_backward(T* dinp, T* dw, const T* dout, const T* inp, const T* w, const stat_t<T>* rstd,
                      int64_t N, int64_t C);

// In place on the NH + G Q/K heads of qkv (B,T,(NH+2G)*HS); backward: angle -> -angle.
template <typename T>
void rope(T* qkv, int64_t B, int64_t Tn, int64_t NH, int64_t G, int64_t HS, int64_t rot_dim, float base,
          bool backward, const int32_t* pos = nullptr);

template <typename T> void swiglu_forward(T* out, const T* inp, int64_t N, int64_t F);
template <typename T> void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t N, int64_t F);

template <typename T> void ce_row_max(stat_t<T>* row_max, const T* logits, int64_t N, int64_t V);
template <typename T>
void ce_row_sums(stat_t<T>* sums, const T* logits, const stat_t<T>* row_max, const int32_t* targets,
                 int64_t N, int64_t V, int64_t vocab_start);
template <typename T>
void ce_backward(T* dlogits, const T* logits, const stat_t<T>* row_max, const stat_t<T>* sums,
                 const int32_t* targets, int64_t N, int64_t V, int64_t vocab_start, float dloss);

// FP8 (fp8.cpp): fp8 is the dtype of the FP8 tensors (E4M3 or E5M2);
// out_t may be null (fp8_quantize).
template <typename T>
void fp8_cast_transpose(uint8_t* out, uint8_t* out_t, stat_t<T>* amax, const T* in, stat_t<T> scale,
                        int64_t R, int64_t C, DType fp8);
template <typename T>
void fp8_dequantize(T* out, const uint8_t* in, stat_t<T> scale_inv, int64_t n, DType fp8);
template <typename T>
void fp8_matmul(T* out, const uint8_t* a, DType a_fp8, stat_t<T> a_scale_inv, const uint8_t* b, DType b_fp8,
                stat_t<T> b_scale_inv, const T* bias, bool accumulate, int64_t N, int64_t K, int64_t OC);
// FP8 block scaling (fp8_block.cpp; layouts in backend/ops.h); out_t and
// scale_inv_t of fp8_block_cast may be null.
template <typename T>
void fp8_block_cast(uint8_t* out, stat_t<T>* scale_inv, uint8_t* out_t, stat_t<T>* scale_inv_t, const T* in,
                    int64_t R, int64_t C, DType fp8);
template <typename T>
void fp8_block_cast_tiles(uint8_t* out, uint8_t* out_t, stat_t<T>* scale_inv, stat_t<T>* scale_inv_t, const T* in,
                          int64_t R, int64_t C, DType fp8);
template <typename T>
void fp8_block_matmul(T* out, const uint8_t* a, DType a_fp8, const stat_t<T>* a_scale_inv, const uint8_t* b,
                      DType b_fp8, const stat_t<T>* b_scale_inv, bool b_tiles, const T* bias, bool accumulate,
                      int64_t N, int64_t K, int64_t OC);
// S: the statistics dtype (f32, or f64 holding f32 values); history (M, H) may be null.
template <typename S>
void fp8_update_scale(S* scale, S* scale_inv, S* history, const S* amax, int64_t M, int64_t H, float fp8_max,
                      int margin, bool use_max);

// FP8 attention (fp8_attention.cpp, NOTE [FP8 attention]): the scalars of
// backend::Fp8AttentionMeta, S the statistics type (f32, or f64 holding f32
// values); the amaxes are accumulated in place. Each op reads the fields its
// NOTE step names. qkv (B,T,(NH+2G)*HS) and out (B,T,NH*HS) are E4M3 codes,
// lse (B,NH,T); dout and dqkv are codes of dtype fmt (E4M3 or E5M2).
template <typename S>
struct Fp8AttentionScalars {
  S qkv_scale_inv = 1;
  S s_scale = 1, s_scale_inv = 1;
  S o_scale = 1, o_scale_inv = 1;
  S dout_scale_inv = 1;
  S dp_scale = 1, dp_scale_inv = 1;
  S dqkv_scale = 1;
  S* s_amax = nullptr;
  S* o_amax = nullptr;
  S* dp_amax = nullptr;
  S* dqkv_amax = nullptr;
};
template <typename S>
void attention_fp8_forward(uint8_t* out, S* lse, const uint8_t* qkv, const Fp8AttentionScalars<S>& sc, int64_t B,
                           int64_t Tn, int64_t NH, int64_t G, int64_t HS);
template <typename S>
void attention_fp8_backward(uint8_t* dqkv, const uint8_t* dout, const uint8_t* qkv, const uint8_t* out,
                            const S* lse, const Fp8AttentionScalars<S>& sc, DType fmt, int64_t B, int64_t Tn,
                            int64_t NH, int64_t G, int64_t HS);

// Mixture of experts (moe.cpp). S: the statistics type (float or double).
template <typename S>
void moe_router_topk(S* probs, int32_t* indices, const S* logits, const S* bias, int64_t N, int64_t E, int k,
                     bool use_sigmoid, bool pre_softmax, float scaling);
template <typename S>
void moe_router_topk_backward(S* dlogits, const S* dprobs, const S* logits, const int32_t* indices, int64_t N,
                              int64_t E, int k, bool use_sigmoid, bool pre_softmax, float scaling);
template <typename S>
void moe_aux_loss(S* dlogits, S* losses, const S* logits, int64_t N, int64_t E, int k, bool use_sigmoid,
                  int64_t seq_length, float aux_coeff, float z_coeff, float grad_scale);
template <typename S>
void moe_permute_map(int32_t* row_map, int32_t* counts, const int32_t* indices, const S* probs, int64_t slots,
                     int64_t E, int64_t capacity, bool drop_by_probs);
template <typename T>
void moe_permute(T* out, const T* inp, const int32_t* row_map, int64_t R, int64_t C, int k);
template <typename T>
void moe_unpermute(T* out, const T* inp, const int32_t* row_map, const stat_t<T>* probs, int64_t N, int64_t R,
                   int64_t C, int k);
template <typename T>
void moe_unpermute_backward(T* dinp, stat_t<T>* dprobs, const T* dout, const T* inp, const int32_t* row_map,
                            const stat_t<T>* probs, int64_t N, int64_t R, int64_t C, int k);

template <typename T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, float lr, float b1, float b2,
                  float eps, float wd, int64_t step, float grad_scale);

}  // namespace tripod::backend::cpu
