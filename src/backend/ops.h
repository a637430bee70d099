// The Backend interface: every numeric kernel the model and the optimizer
// use, behind one class. backend/cpu is the readable reference (the
// specification); backend/cuda implements the same ops with the same names.
// Pure C++: no CUDA types appear here.
//
// Shape of the class (one set of checks for every backend):
//  - Each op is a public NON-virtual member. It runs the op's validator
//    (backend/ops.cpp: shapes, dtypes, device, with messages that name the op
//    and the tensor), then calls the protected virtual <op>_impl, which a
//    backend overrides. An _impl may assume its arguments passed the checks.
//  - The fused ops (fused_residual_layernorm_forward, fused_residual_rmsnorm_forward,
//    matmul_forward_gelu, matmul_backward_dgelu, cross_entropy_fused, and
//    adamw_update with a compute_out: adamw_update_cast_impl) have default _impls composed
//    of the unfused ops (ops.cpp), so the CPU reference gives exactly the
//    unfused results; a backend with a fused kernel overrides them.
//  - The FP8 ops (fp8_quantize, fp8_cast_transpose, fp8_dequantize,
//    fp8_matmul, fp8_update_scale, the fp8_block_* ops) have their
//    validators in ops_fp8.cpp.
//  - The ops' small argument structs (AttentionBlock, Fp8AttentionMeta,
//    AdamWStep, MoeRouting, MoeAuxLoss) live in backend/op_args.h.
//  - Adding an op: docs/adding-an-op.md.
//
// Conventions (all ops):
//  - Tensors are contiguous, row-major, on this backend's device.
//  - Activations may be f32, bf16 or f16 (the compute dtype), or f64 on the
//    CPU reference (computes_in() says which); statistics (mean, rstd, lse,
//    CE max/sums/losses) are f32, or f64 when the activations are f64; token
//    ids are i32. "Wide" tensors (LayerNorm/RMSNorm weight/bias, parameter
//    gradients) have the activation dtype, or f32 under bf16/f16 activations
//    (fp32 LayerNorm params and fp32 gradient accumulation).
//  - Parameter gradients ACCUMULATE (+=), so micro-batches add up without
//    extra passes. Activation gradients OVERWRITE, except where an op says
//    "dinp +=" (layernorm_backward adds into the residual-stream gradient,
//    as llm.c does).
//  - Ops are enqueued in order on the backend's stream; results are visible
//    to later ops. Host reads go through copy() + synchronize().
//  - Shape letters: N rows (= B*T), C width, OC output width, V_tp local
//    vocab rows, NH_tp local heads, G_tp local K/V heads (query groups), HS
//    head size, F the SwiGLU (ffn) width. See config/gpt_config.h.
//
// Usage (factories live with each backend: backend/cpu/cpu_backend.h,
// backend/cuda/cuda_backend.h):
//   auto be = make_cpu_backend();
//   Tensor y = be->empty({N, OC}, DType::F32);
//   be->matmul_forward(y, x, w, &b);
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/op_args.h"
#include "tensor/tensor.h"

namespace tripod::backend {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;  // "cpu", "cuda:0 (NVIDIA H200)"
  // The activation dtypes the ops compute in (cpu: f32, f64; cuda: f32, bf16, f16).
  virtual bool computes_in(DType act) const = 0;
  // The floating dtypes cast() converts between (at least computes_in()).
  virtual bool stores(DType d) const { return computes_in(d); }

  // ---- memory ----
  // Allocate on this device (contents undefined).
  virtual Tensor empty(const Shape& shape, DType dtype) = 0;
  virtual void zero(Tensor& t) = 0;
  // Copy between any two tensors of equal numel and dtype, on the host or this device.
  void copy(Tensor& dst, const Tensor& src);
  // dst = src converted to dst's dtype (f32 <-> bf16/f16, round to nearest even).
  void cast(Tensor& dst, const Tensor& src);
  virtual void synchronize() = 0;
  // The queue this backend's work runs on, for device communicators to
  // order their collectives after (a cudaStream_t on CUDA; null on CPU).
  virtual void* native_stream() const { return nullptr; }
  // Peak bytes held by this device's allocator since the last reset.
  virtual size_t peak_memory_bytes() const = 0;
  // Megatron's --deterministic-mode: prefer kernels whose results do not
  // depend on the order of floating-point atomics (cuda: cuDNN attention's
  // deterministic dQ, which costs workspace and ~10% of the attention
  // backward). The CPU reference is deterministic always.
  virtual void set_deterministic(bool) {}
  // Why this device's FP8 GEMMs are not native (fp8_gemm_limitation); ""
  // where they are, and on the CPU, whose FP8 is the reference emulation.
  virtual std::string fp8_gemm_note() const { return ""; }
  // Why attention_fp8_* cannot run here for this head size (""; the CPU's
  // emulation serves every one; CUDA: fp8_attention_limitation, or no cuDNN).
  virtual std::string fp8_attention_note(int64_t /*head_size*/) const { return ""; }
  // Megatron's --profile: open / close the profiler's capture range (cuda:
  // cudaProfilerStart / Stop, for `nsys profile -c cudaProfilerApi`). The
  // CPU reference has none; returns false there.
  virtual bool profiler_start() { return false; }
  virtual void profiler_stop() {}

  // ---- elementwise ----
  void add(Tensor& out, const Tensor& a, const Tensor& b);  // out = a + b; out may alias a or b
  void scale(Tensor& t, float s);                            // t *= s
  void add_bias(Tensor& out, const Tensor& bias);            // out(N, OC) += bias(OC)

  // ---- embedding ----
  // out(B,T,C) = wte[tokens - vocab_start] (+ wpe[t] when wpe is given).
  // Tokens outside [vocab_start, vocab_start + V_tp) give a zero row: the
  // vocab-parallel embedding of Megatron, whose partial rows the tp group sums.
  void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor* wpe,
                         int64_t vocab_start);
  // dwte += scatter of dout rows by token (local vocab range only);
  // dwpe(T,C) += sum over b of dout. Either may be null.
  void embedding_backward(Tensor* dwte, Tensor* dwpe, const Tensor& dout, const Tensor& tokens,
                          int64_t vocab_start);

  // ---- layernorm ----
  // out(N,C) = (inp - mean) * rstd * weight + bias; mean(N), rstd(N) saved.
  // weight/bias: wide (the dtype of inp, or f32 under a bf16/f16 inp).
  void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias, float eps);
  // dinp += d/dinp; dweight += ; dbias += . With out (and bias) given, the
  // same pass also writes the forward's output again, out(N,C) =
  // (inp - mean) * rstd * weight + bias from the saved statistics: the
  // model keeps no LayerNorm output per layer and gets it back here for the
  // next linear's weight gradient (NOTE [LayerNorm outputs] in model/).
  void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                          const Tensor& inp, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd, Tensor* out = nullptr, const Tensor* bias = nullptr);
  // Fused residual add + LayerNorm (the pre-LN block boundary):
  // residual(N,C) = a + b; out = layernorm(residual) with mean/rstd saved, as
  // add() then layernorm_forward(). residual may alias a or b.
  void fused_residual_layernorm_forward(Tensor& residual, Tensor& out, Tensor& mean, Tensor& rstd,
                                        const Tensor& a, const Tensor& b, const Tensor& weight,
                                        const Tensor& bias, float eps);

  // ---- matmul (linear layer) ----
  // out(N,OC) = inp(N,C) @ weight(OC,C)^T (+ bias(OC)).
  void matmul_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor* bias);
  // dinp(N,C) = dout @ weight (overwrite); dweight(OC,C) += dout^T @ inp;
  // dbias(OC) += column sums of dout. Any of the three may be null.
  void matmul_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& weight);
  // Linear layer + GELU (the MLP's fc): pre(N,OC) = inp @ weight^T (+ bias);
  // out = gelu(pre). As matmul_forward then gelu_forward.
  void matmul_forward_gelu(Tensor& out, Tensor& pre, const Tensor& inp, const Tensor& weight,
                           const Tensor* bias);
  // Backward of a linear layer whose input was inp = gelu(pre) (the MLP's
  // proj), with the GELU backward folded in (llm.c's matmul_backward with
  // pre_gelu): dpre(N,C) = (dout @ weight) * gelu'(pre) (overwrite);
  // dweight(OC,C) += dout^T @ inp; dbias(OC) += column sums of dout
  // (either may be null). As matmul_backward then gelu_backward.
  void matmul_backward_dgelu(Tensor& dpre, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                             const Tensor& inp, const Tensor& weight, const Tensor& pre);

  // ---- GELU (tanh approximation, as GPT-2 and Megatron's gelu_impl) ----
  void gelu_forward(Tensor& out, const Tensor& inp);
  void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout);  // overwrite

  // ---- causal self-attention (multi-head or grouped-query) ----
  // qkv(B,T,(NH_tp + 2*G_tp)*HS) holds [Q: NH_tp heads | K: G_tp heads | V:
  // G_tp heads], each head HS wide; n_kv_head = G_tp (0 means n_head: plain
  // multi-head attention, qkv(B,T,3*C_tp)). Query head h attends with K/V
  // head h / (NH_tp / G_tp) (NH_tp % G_tp == 0). out(B,T,NH_tp*HS) =
  // softmax(Q K^T / sqrt(HS), causal) V per head, HS = out width / n_head
  // (it need not be C/NH: Megatron --kv-channels); lse(B,NH_tp,T) saves the
  // log-sum-exp of each softmax row, so backward needs no T x T buffer.
  void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int n_head, int n_kv_head = 0);
  // dqkv has qkv's layout, overwritten; dK and dV of a K/V head are summed
  // over the query heads of its group.
  void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                          const Tensor& lse, int n_head, int n_kv_head = 0);

  // ---- block attention (context parallelism's ring; validators in ops_context_parallel.cpp) ----
  // The ring passes K/V of other ranks' sequence chunks: kv(B,Tk,2*G_tp*HS) =
  // [K: G_tp heads | V: G_tp heads], the K/V columns of a qkv tensor.
  // dst = the K/V columns of src, where one of dst and src is a qkv(B,T,
  // (NH_tp + 2*G_tp)*HS) tensor and the other a kv(B,T,2*G_tp*HS) tensor
  // (the widths say which; the Q columns of a qkv dst are untouched).
  void attention_kv_copy(Tensor& dst, const Tensor& src, int n_head, int n_kv_head = 0);
  // The attention of qkv's Q rows blk.q_* against kv's K/V rows blk.kv_*
  // (AttentionBlock), into those rows of out(B,Tq,NH_tp*HS) and
  // lse(B,NH_tp,Tq). accumulate false: written, as attention_forward writes
  // them (with blk the whole sequence, causal: attention_forward's
  // numbers). accumulate true: merged with the partial result they hold
  // (other K/V blocks) by log-sum-exp: lse' = log(e^lse + e^lse_blk),
  // out' = out e^(lse - lse') + out_blk e^(lse_blk - lse'), which is the
  // attention over the union of the blocks. Other rows are untouched.
  void attention_block_forward(Tensor& out, Tensor& lse, const Tensor& qkv, const Tensor& kv, int n_head,
                               int n_kv_head, const AttentionBlock& blk, bool accumulate);
  // Backward of one block given the final (merged over every block) out
  // and lse of the Q rows: dqkv's Q columns of the window rows += dQ
  // (K/V columns untouched); dkv(B,Tk,2*G_tp*HS) window rows += dK, dV
  // (summed over each K/V head's query heads). Summing over the blocks
  // gives attention_backward's gradients.
  void attention_block_backward(Tensor& dqkv, Tensor& dkv, const Tensor& dout, const Tensor& qkv,
                                const Tensor& kv, const Tensor& out, const Tensor& lse, int n_head,
                                int n_kv_head, const AttentionBlock& blk);
  // out(R,C)[r] = inp(N,C)[index[r]], index i32 (R) on this device with
  // entries in [0, N): a row gather (context parallelism's all-to-all packs
  // and unpacks attention heads with it, rows of one head's HS elements).
  // out and inp must not overlap.
  void gather_rows(Tensor& out, const Tensor& inp, const Tensor& index);

  // ---- RMSNorm (Zhang & Sennrich 2019; Megatron --normalization RMSNorm) ----
  // out(N,C) = inp * rstd * weight; rstd(N) = 1/sqrt(mean_j inp^2 + eps)
  // saved (stat dtype). weight: wide.
  void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps);
  // dinp += d/dinp (like layernorm_backward); dweight += .
  void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight, const Tensor& rstd);
  // residual(N,C) = a + b; out = rmsnorm(residual) with rstd saved, as add()
  // then rmsnorm_forward(). residual may alias a or b.
  void fused_residual_rmsnorm_forward(Tensor& residual, Tensor& out, Tensor& rstd, const Tensor& a,
                                      const Tensor& b, const Tensor& weight, float eps);

  // ---- rotary position embedding (Su et al. 2021), rotate-half convention
  // (GPT-NeoX, Megatron-core, Hugging Face Llama) ----
  // In place on the Q and K heads of qkv(B,T,(NH_tp + 2*G_tp)*HS) laid out
  // as for attention (n_kv_head 0 means n_head). For row (b,t) and each Q/K
  // head x: with r = rot_dim (even, <= HS), h = r/2, theta_i = base^(-2i/r),
  // angle = t*theta_i (computed in double, cos/sin then in the stat dtype),
  //   x[i] <- x[i] cos - x[i+h] sin,  x[i+h] <- x[i+h] cos + x[i] sin  (i < h);
  // dims >= r untouched (Megatron --rotary-percent). V untouched.
  // positions (optional): i32 (T), the position of row t in every batch
  // row (angle = positions[t] * theta_i); context parallelism's chunks of
  // a sequence are not at positions 0..T-1. Null: positions[t] = t.
  void rope_forward(Tensor& qkv, int n_head, int n_kv_head, int64_t rot_dim, float base,
                    const Tensor* positions = nullptr);
  // The transpose rotation (angle -> -angle) in place on dqkv's Q and K heads.
  void rope_backward(Tensor& dqkv, int n_head, int n_kv_head, int64_t rot_dim, float base,
                     const Tensor* positions = nullptr);

  // ---- SwiGLU (Shazeer 2020; Megatron --swiglu) ----
  // inp(N,2F) = [gate | up] (Megatron's torch.chunk order); out(N,F) = silu(gate) * up.
  void swiglu_forward(Tensor& out, const Tensor& inp);
  // dinp(N,2F) = [dgate | dup] (overwrite).
  void swiglu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout);

  // ---- dropout (counter-based: the mask is recomputed from seed, never stored) ----
  // out = inp * keep / (1 - p), keep = hash(seed, offset + element index) >= p.
  void dropout_forward(Tensor& out, const Tensor& inp, float p, uint64_t seed, uint64_t offset);
  void dropout_backward(Tensor& dinp, const Tensor& dout, float p, uint64_t seed, uint64_t offset);

  // ---- vocab-parallel softmax cross-entropy (never materialises probabilities) ----
  // With tp > 1 the caller all-reduces between the steps (Megatron's
  // _VocabParallelCrossEntropy): max(MAX) after step 1, sums(SUM) after step 2.
  // 1. row_max(N) = max_j logits(N,V_tp)[j]
  void ce_row_max(Tensor& row_max, const Tensor& logits);
  // 2. sums(2,N): sums[0] = sum_j exp(logits - row_max), sums[1] = logit of
  //    the target when it lies in [vocab_start, vocab_start+V_tp), else 0.
  void ce_row_sums(Tensor& sums, const Tensor& logits, const Tensor& row_max,
                   const Tensor& targets, int64_t vocab_start);
  // 3. losses(N) = log(sums[0]) + row_max - sums[1]
  void ce_loss(Tensor& losses, const Tensor& sums, const Tensor& row_max);
  // dlogits(N,V_tp) = dloss * (softmax - onehot(target)); may alias logits.
  void ce_backward(Tensor& dlogits, const Tensor& logits, const Tensor& row_max, const Tensor& sums,
                   const Tensor& targets, int64_t vocab_start, float dloss);
  // Unsplit vocab (tp = 1): losses(N) and, when dlogits is given,
  // dlogits(N,V) = dloss * (softmax - onehot(target)) in one pass over the
  // logits (dlogits may alias logits). As steps 1-3 then ce_backward with
  // vocab_start 0.
  void cross_entropy_fused(Tensor& losses, Tensor* dlogits, const Tensor& logits,
                           const Tensor& targets, float dloss);

  // ---- optimizer ----
  // AdamW on f32 master weights (f64 on the cpu reference); param, grad, m,
  // v all of one dtype, same numel. compute_out (optional; same numel, a
  // dtype cast() converts to, overlapping none of the others) receives the
  // updated param converted as cast() converts it, bit for bit: the bf16/fp16
  // compute copy of mixed precision, written in the same pass instead of a
  // second read of the master weights.
  void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWStep& step,
                    Tensor* compute_out = nullptr);
  // acc(1) += sum of x^2 (accumulated in at least f32; f64 on cpu); acc is
  // a statistics tensor (f32, or f64 under f64 x).
  void sum_squares(Tensor& acc, const Tensor& x);

  // ---- FP8 (Transformer Engine's cast and GEMM ops; validators in ops_fp8.cpp) ----
  // FP8 tensors have dtype E4M3 or E5M2. A value v converts as
  // tensor/dtype.h's f32_to_fp8(f32(v) * scale): the product in f32, then
  // round to nearest even, saturating to +-max (448 / 57344; also +-inf);
  // NaN -> 0x7f. scale, scale_inv and amax are one-element statistics
  // tensors on the device (f32; f64 under f64 inputs on the CPU reference,
  // holding f32 values), so a delayed-scaling recipe can update them without
  // a host sync. amax ACCUMULATES: amax = max(amax, max |in|) over the
  // elements (NaN elements are skipped, as fmaxf; inf counts), so one
  // amax can gather several tensors (zero it to start a new one).
  //
  // out = fp8(in * scale) (out: E4M3 or E5M2, in's numel).
  void fp8_quantize(Tensor& out, Tensor& amax, const Tensor& in, const Tensor& scale);
  // in(R, C) (R = numel / last dim): out(R, C) as fp8_quantize and out_t(C, R)
  // its transpose, in one pass (Hopper's FP8 GEMM takes K-major operands
  // only, so the weight gradient needs the transposes of dy and x).
  void fp8_cast_transpose(Tensor& out, Tensor& out_t, Tensor& amax, const Tensor& in,
                          const Tensor& scale);
  // The MLP's SwiGLU with the cast of its output for fc2 (delayed scaling,
  // where the scale is known before the tensor is): inp(R, 2F) = [gate | up]
  // of the compute dtype; out(R, F) and out_t(F, R) are exactly
  // fp8_cast_transpose of swiglu_forward(inp) as the compute dtype stores
  // it, without that tensor being written.
  void fp8_swiglu_cast_transpose(Tensor& out, Tensor& out_t, Tensor& amax, const Tensor& inp, const Tensor& scale);
  // Its backward with the cast of fc1's output gradient: out(R, 2F) and
  // out_t(2F, R) are exactly fp8_cast_transpose of swiglu_backward(inp, dout)
  // as the compute dtype stores it (dout (R, F)).
  void fp8_swiglu_backward_cast_transpose(Tensor& out, Tensor& out_t, Tensor& amax, const Tensor& inp,
                                          const Tensor& dout, const Tensor& scale);
  // out = f32(in) * scale_inv (in f32), rounded to out's dtype.
  void fp8_dequantize(Tensor& out, const Tensor& in, const Tensor& scale_inv);
  // The linear layer's GEMM on FP8 operands, both K-major:
  // out(N, OC) = (a(N, K) * a_scale_inv) @ (b(OC, K) * b_scale_inv)^T (+ bias(OC)),
  // accumulated in f32 (f64 on the reference) and rounded once to out's
  // dtype; with accumulate, out += the product instead (no bias then).
  //   forward  y = x W^T      fp8_matmul(y, x8, sx_inv, w8, sw_inv, &bias)
  //   dgrad    dx = dy W      fp8_matmul(dx, dy8, sdy_inv, w8_t, sw_inv)          (w8_t (C, OC))
  //   wgrad    dW += dy^T x   fp8_matmul(dW, dy8_t, sdy_inv, x8_t, sx_inv, nullptr, true)
  // a and b are not both E5M2 (no FP8 GEMM takes two E5M2 operands; in
  // the hybrid format only gradients are E5M2). bias has out's dtype.
  // fast_accum: the backend may accumulate with less than f32 precision
  // (Hopper's FP8 accumulation without the periodic f32 promotion, which
  // Transformer Engine uses for the forward GEMM); the reference ignores it.
  void fp8_matmul(Tensor& out, const Tensor& a, const Tensor& a_scale_inv, const Tensor& b,
                  const Tensor& b_scale_inv, const Tensor* bias = nullptr, bool accumulate = false,
                  bool fast_accum = false);
  // The scaling update of M tensors at once (Transformer Engine's amax and
  // scale update; model/fp8_meta.h), on the device without a host sync.
  // scale, scale_inv, amax: (M) statistics. With amax_history (M, H) each
  // row rolls first (row m = [amax[m], row m[0 .. H-2]], newest first) and
  // a = max of the row (use_max) or its newest entry; without, a = amax[m].
  // Then in f32: scale = (fp8_max / a) * 2^-margin when a > 0 and finite
  // (an overflow to inf saturates to FLT_MAX); otherwise the scale stays as
  // it is with a history (Transformer Engine's delayed scaling: an
  // overflowed or empty step keeps the last good scale) and is 1 without;
  // scale_inv = 1 / scale.
  void fp8_update_scale(Tensor& scale, Tensor& scale_inv, Tensor* amax_history, const Tensor& amax, float fp8_max,
                        int margin, bool use_max);
  // Block scaling (--fp8-recipe blockwise; DeepSeek-V3's and Transformer
  // Engine's Float8BlockScaling): each 1x128 block of a row (activations,
  // gradients) or 128x128 tile (weights) has its own scale, the power of two
  // 2^floor(log2(fp8_max / amax)) of its amax (1 when amax is 0, inf or
  // NaN; FLT_MAX's power of two when the quotient overflows), so scaling is
  // exact. The inverses (scale_inv, f32; f64 holding f32 values on the
  // reference) are kept in cuBLASLt's layouts for a row-major (rows, K) operand:
  //   1x128    (ceil(K/128), rows): block j of row r at [j][r]
  //   128x128  (ceil(rows/128), fp8_tile_ld(K)): tile (i, j) at [i][j]
  // in (R, C): out (R, C) with 1x128 blocks along C, scale_inv of 1x128
  // layout; with out_t, out_t (C, R) with blocks along R (128 rows of a
  // column, quantized from in), scale_inv_t (ceil(R/128), C).
  void fp8_block_cast(Tensor& out, Tensor& scale_inv, Tensor* out_t, Tensor* scale_inv_t, const Tensor& in);
  // in (R, C) in 128x128 tiles: out (R, C), out_t (C, R) its transpose (the
  // same codes), scale_inv (ceil(R/128), ld(C)) and scale_inv_t (ceil(C/128), ld(R)).
  void fp8_block_cast_tiles(Tensor& out, Tensor& out_t, Tensor& scale_inv, Tensor& scale_inv_t, const Tensor& in);
  // The SwiGLU casts of block scaling (the scales come from each block's own
  // values, so the SwiGLU kernel can write them): exactly fp8_block_cast
  // (with the transpose) of swiglu_forward(inp) (R, F), and of
  // swiglu_backward(inp, dout) (R, 2F), as the compute dtype stores them,
  // without those tensors being written. inp (R, 2F) = [gate | up].
  void fp8_swiglu_block_cast(Tensor& out, Tensor& scale_inv, Tensor& out_t, Tensor& scale_inv_t, const Tensor& inp);
  void fp8_swiglu_backward_block_cast(Tensor& out, Tensor& scale_inv, Tensor& out_t, Tensor& scale_inv_t,
                                      const Tensor& inp, const Tensor& dout);
  // fp8_matmul on block-scaled operands: a (N, K) in 1x128 blocks; b (OC, K)
  // in 128x128 tiles (b_tiles: forward, dgrad) or 1x128 blocks (wgrad). Each
  // code times its block's scale_inv; f32 accumulation (f64 on the reference).
  void fp8_block_matmul(Tensor& out, const Tensor& a, const Tensor& a_scale_inv, const Tensor& b,
                        const Tensor& b_scale_inv, bool b_tiles, const Tensor* bias = nullptr, bool accumulate = false);

  // ---- FP8 attention (Transformer Engine's FP8 dot product attention; validators in ops_fp8.cpp) ----
  // Causal self-attention (multi-head or grouped-query, qkv's layout as
  // attention_forward's) on FP8 Q, K, V, as cuDNN's FP8 flash attention
  // computes it (the graph of cudnn-frontend's FP8 SDPA; NOTE [FP8
  // attention] in backend/cpu/fp8_attention.cpp states it step by step).
  // The scales are Fp8AttentionMeta's one-element statistics tensors; a
  // value v is stored as fp8(v * scale), as the FP8 casts store it.
  //   forward:  S = (Q8 K8^T) * qkv_scale_inv^2 / sqrt(HS), causal;
  //             lse = log-sum-exp of S's rows (saved, as attention_forward's);
  //             P = exp(S - lse);          s_amax  = max(s_amax, max P)
  //             P8 = E4M3(P * s_scale);
  //             O = (P8 V8) * s_scale_inv * qkv_scale_inv;
  //                                        o_amax  = max(o_amax, max |O|)
  //             out = E4M3(O * o_scale).
  //   backward: D = rowsum(dout8 * out8) * dout_scale_inv * o_scale_inv;
  //             P, P8 recomputed from qkv and lse as above;
  //             dV = (P8^T dout8) * s_scale_inv * dout_scale_inv;
  //             dS = ((dout8 V8^T) * dout_scale_inv * qkv_scale_inv - D) * P / sqrt(HS);
  //                                        dp_amax = max(dp_amax, max |dS|)
  //             dS8 = fmt(dS * dp_scale) (fmt: dout's FP8 dtype);
  //             dQ = (dS8 K8) * dp_scale_inv * qkv_scale_inv;
  //             dK = (dS8^T Q8) * dp_scale_inv * qkv_scale_inv;
  //             dqkv = fmt(d * dqkv_scale) for dQ, dK, dV (dK, dV summed
  //             over the query heads of the group first);
  //                                        dqkv_amax = max(dqkv_amax, max |dQ|, |dK|, |dV|).
  // qkv and out are E4M3; dout and dqkv share one FP8 dtype (E5M2 under
  // the hybrid format). The amaxes ACCUMULATE, as the casts' amax. Sums in
  // f32 or better; each FP8 rounding as f32_to_fp8 (so a backend that
  // forms P or dS in another order may round an element to the adjacent
  // code). The CUDA backend serves head size 128 on Hopper with cuDNN 9.19
  // or later (cuDNN's FP8 attention) and stops with why otherwise; it runs a
  // grouped-query backward as multi-head on repeated K/V and sums each
  // group's dK, dV codes (one rounding more than the formula's).
  void attention_fp8_forward(Tensor& out, Tensor& lse, const Tensor& qkv, const Fp8AttentionMeta& m, int n_head,
                             int n_kv_head = 0);
  void attention_fp8_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                              const Tensor& lse, const Fp8AttentionMeta& m, int n_head, int n_kv_head = 0);

  // ---- mixture of experts (validators in ops_moe.cpp; model/moe_layer.h) ----
  // Router logits, probs and losses are statistics tensors (f32; f64 on
  // the reference under f64 activations); indices and row maps are i32.
  // A slot is one (token, choice) pair, slot = n * k + j.
  //
  // probs(N,k), indices(N,k) from logits(N,E) (MoeRouting); expert_bias (E)
  // statistics, sigmoid only (may be null).
  void moe_router_topk(Tensor& probs, Tensor& indices, const Tensor& logits, const Tensor* expert_bias,
                       const MoeRouting& r);
  // dlogits(N,E) = d probs / d logits applied to dprobs(N,k) (overwrite;
  // the bias does not enter the gradient).
  void moe_router_topk_backward(Tensor& dlogits, const Tensor& dprobs, const Tensor& logits, const Tensor& indices,
                                const MoeRouting& r);
  // losses(2) = [aux, z] (MoeAuxLoss); with dlogits(N,E) given,
  // dlogits += grad_scale * d (aux + z) / d logits.
  void moe_aux_loss(Tensor* dlogits, Tensor& losses, const Tensor& logits, const MoeAuxLoss& a);
  // The dispatch order: row_map(N*k) lists the kept slots sorted by expert,
  // in slot order within an expert, then -1s; tokens_per_expert(E) (i32)
  // counts them. capacity < 0 keeps every slot (dropless); else each
  // expert keeps at most `capacity` slots: those of the highest probs
  // (drop_by_probs; ties to the lower slot) or the first ones.
  void moe_permute_map(Tensor& row_map, Tensor& tokens_per_expert, const Tensor& indices, const Tensor& probs,
                       int64_t num_experts, int64_t capacity, bool drop_by_probs);
  // out(R,C)[r] = inp(N,C)[row_map[r] / k] for the first R entries of row_map.
  void moe_permute(Tensor& out, const Tensor& inp, const Tensor& row_map, int topk);
  // dinp(N,C)[n] = sum over n's kept slots, in slot order, of dout(R,C) rows (overwrite).
  void moe_permute_backward(Tensor& dinp, const Tensor& dout, const Tensor& row_map, int topk);
  // out(N,C)[n] = sum over n's kept slots s, in slot order, of probs[s] * inp(R,C)[row of s] (overwrite).
  void moe_unpermute(Tensor& out, const Tensor& inp, const Tensor& row_map, const Tensor& probs);
  // dinp(R,C)[r] = probs[s] dout[n] and dprobs[s] = dout[n] . inp[r] for r's slot s
  // (overwrite; dprobs 0 at dropped slots).
  void moe_unpermute_backward(Tensor& dinp, Tensor& dprobs, const Tensor& dout, const Tensor& inp,
                              const Tensor& row_map, const Tensor& probs);

  // The experts' GEMMs (--moe-grouped-gemm): group g owns the rows[g] rows
  // of inp / out after the groups before it; out's rows = inp's rows @
  // weights[g]^T, weights[g] (OC, C) of inp's dtype, no bias. A null
  // weights[g] skips its rows (left as they are: padding). inp (R, C),
  // out (R, OC), R >= the rows' sum. As matmul_forward per group (the
  // default), in one launch where the backend can.
  void grouped_matmul_forward(Tensor& out, const Tensor& inp, const std::vector<const Tensor*>& weights,
                              const std::vector<int64_t>& rows);
  // Its data gradient: dinp's rows = dout's rows @ weights[g] (overwrite).
  void grouped_matmul_backward_data(Tensor& dinp, const Tensor& dout, const std::vector<const Tensor*>& weights,
                                    const std::vector<int64_t>& rows);
 protected:
  // One per public op, called after its checks passed (see ops.cpp).
  virtual void copy_impl(Tensor& dst, const Tensor& src) = 0;
  virtual void cast_impl(Tensor& dst, const Tensor& src) = 0;
  virtual void add_impl(Tensor& out, const Tensor& a, const Tensor& b) = 0;
  virtual void scale_impl(Tensor& t, float s) = 0;
  virtual void add_bias_impl(Tensor& out, const Tensor& bias) = 0;
  virtual void embedding_forward_impl(Tensor& out, const Tensor& tokens, const Tensor& wte,
                                      const Tensor* wpe, int64_t vocab_start) = 0;
  virtual void embedding_backward_impl(Tensor* dwte, Tensor* dwpe, const Tensor& dout,
                                       const Tensor& tokens, int64_t vocab_start) = 0;
  virtual void layernorm_forward_impl(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                                      const Tensor& weight, const Tensor& bias, float eps) = 0;
  virtual void layernorm_backward_impl(Tensor& dinp, Tensor& dweight, Tensor& dbias,
                                       const Tensor& dout, const Tensor& inp, const Tensor& weight,
                                       const Tensor& mean, const Tensor& rstd, Tensor* out,
                                       const Tensor* bias) = 0;
  virtual void fused_residual_layernorm_forward_impl(Tensor& residual, Tensor& out, Tensor& mean,
                                                     Tensor& rstd, const Tensor& a, const Tensor& b,
                                                     const Tensor& weight, const Tensor& bias,
                                                     float eps);
  virtual void matmul_forward_impl(Tensor& out, const Tensor& inp, const Tensor& weight,
                                   const Tensor* bias) = 0;
  virtual void matmul_backward_impl(Tensor* dinp, Tensor* dweight, Tensor* dbias,
                                    const Tensor& dout, const Tensor& inp, const Tensor& weight) = 0;
  virtual void matmul_forward_gelu_impl(Tensor& out, Tensor& pre, const Tensor& inp,
                                        const Tensor& weight, const Tensor* bias);
  virtual void matmul_backward_dgelu_impl(Tensor& dpre, Tensor* dweight, Tensor* dbias,
                                          const Tensor& dout, const Tensor& inp,
                                          const Tensor& weight, const Tensor& pre);
  virtual void gelu_forward_impl(Tensor& out, const Tensor& inp) = 0;
  virtual void gelu_backward_impl(Tensor& dinp, const Tensor& inp, const Tensor& dout) = 0;
  // n_kv_head arrives resolved (never 0): n_kv_head == n_head is multi-head attention.
  virtual void attention_forward_impl(Tensor& out, Tensor& lse, const Tensor& qkv, int n_head,
                                      int n_kv_head) = 0;
  virtual void attention_backward_impl(Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                       const Tensor& out, const Tensor& lse, int n_head,
                                       int n_kv_head) = 0;
  // Block attention: default bodies refuse (a backend without the kernels
  // cannot run context parallelism); the CPU reference implements them.
  virtual void attention_kv_copy_impl(Tensor& dst, const Tensor& src, int n_head, int n_kv_head);
  virtual void attention_block_forward_impl(Tensor& out, Tensor& lse, const Tensor& qkv, const Tensor& kv,
                                            int n_head, int n_kv_head, const AttentionBlock& blk,
                                            bool accumulate);
  virtual void attention_block_backward_impl(Tensor& dqkv, Tensor& dkv, const Tensor& dout, const Tensor& qkv,
                                             const Tensor& kv, const Tensor& out, const Tensor& lse, int n_head,
                                             int n_kv_head, const AttentionBlock& blk);
  virtual void gather_rows_impl(Tensor& out, const Tensor& inp, const Tensor& index);
  virtual void rmsnorm_forward_impl(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                                    float eps) = 0;
  virtual void rmsnorm_backward_impl(Tensor& dinp, Tensor& dweight, const Tensor& dout,
                                     const Tensor& inp, const Tensor& weight, const Tensor& rstd) = 0;
  virtual void fused_residual_rmsnorm_forward_impl(Tensor& residual, Tensor& out, Tensor& rstd,
                                                   const Tensor& a, const Tensor& b,
                                                   const Tensor& weight, float eps);
  // backward: the rotation by -angle. n_kv_head resolved as for attention.
  virtual void rope_impl(Tensor& qkv, int n_head, int n_kv_head, int64_t rot_dim, float base,
                         bool backward) = 0;
  // RoPE at given positions (i32 (T) on this device); default refuses, as the block attention.
  virtual void rope_positions_impl(Tensor& qkv, int n_head, int n_kv_head, int64_t rot_dim, float base,
                                   bool backward, const Tensor& positions);
  virtual void swiglu_forward_impl(Tensor& out, const Tensor& inp) = 0;
  virtual void swiglu_backward_impl(Tensor& dinp, const Tensor& inp, const Tensor& dout) = 0;
  virtual void dropout_forward_impl(Tensor& out, const Tensor& inp, float p, uint64_t seed,
                                    uint64_t offset) = 0;
  virtual void dropout_backward_impl(Tensor& dinp, const Tensor& dout, float p, uint64_t seed,
                                     uint64_t offset) = 0;
  virtual void ce_row_max_impl(Tensor& row_max, const Tensor& logits) = 0;
  virtual void ce_row_sums_impl(Tensor& sums, const Tensor& logits, const Tensor& row_max,
                                const Tensor& targets, int64_t vocab_start) = 0;
  virtual void ce_loss_impl(Tensor& losses, const Tensor& sums, const Tensor& row_max) = 0;
  virtual void ce_backward_impl(Tensor& dlogits, const Tensor& logits, const Tensor& row_max,
                                const Tensor& sums, const Tensor& targets, int64_t vocab_start,
                                float dloss) = 0;
  virtual void cross_entropy_fused_impl(Tensor& losses, Tensor* dlogits, const Tensor& logits,
                                        const Tensor& targets, float dloss);
  virtual void adamw_update_impl(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                                 const AdamWStep& step) = 0;
  // adamw_update with a compute_out; default: adamw_update_impl then cast_impl.
  virtual void adamw_update_cast_impl(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                                      const AdamWStep& step, Tensor& compute_out);
  virtual void sum_squares_impl(Tensor& acc, const Tensor& x) = 0;
  // FP8: fp8_quantize is fp8_cast_transpose_impl with out_t null.
  virtual void fp8_cast_transpose_impl(Tensor& out, Tensor* out_t, Tensor& amax, const Tensor& in,
                                       const Tensor& scale) = 0;
  // The SwiGLU casts; defaults: swiglu_*_impl into a temporary of the
  // compute dtype, then fp8_cast_transpose_impl (the definition).
  virtual void fp8_swiglu_cast_transpose_impl(Tensor& out, Tensor& out_t, Tensor& amax, const Tensor& inp,
                                              const Tensor& scale);
  virtual void fp8_swiglu_backward_cast_transpose_impl(Tensor& out, Tensor& out_t, Tensor& amax, const Tensor& inp,
                                                       const Tensor& dout, const Tensor& scale);
  virtual void fp8_dequantize_impl(Tensor& out, const Tensor& in, const Tensor& scale_inv) = 0;
  virtual void fp8_matmul_impl(Tensor& out, const Tensor& a, const Tensor& a_scale_inv, const Tensor& b,
                               const Tensor& b_scale_inv, const Tensor* bias, bool accumulate,
                               bool fast_accum) = 0;
  virtual void fp8_update_scale_impl(Tensor& scale, Tensor& scale_inv, Tensor* amax_history, const Tensor& amax,
                                     float fp8_max, int margin, bool use_max) = 0;
  virtual void fp8_block_cast_impl(Tensor& out, Tensor& scale_inv, Tensor* out_t, Tensor* scale_inv_t,
                                   const Tensor& in) = 0;
  virtual void fp8_block_cast_tiles_impl(Tensor& out, Tensor& out_t, Tensor& scale_inv, Tensor& scale_inv_t,
                                         const Tensor& in) = 0;
  // Defaults: swiglu_*_impl into a temporary, then fp8_block_cast_impl (the definition).
  virtual void fp8_swiglu_block_cast_impl(Tensor& out, Tensor& scale_inv, Tensor& out_t, Tensor& scale_inv_t,
                                          const Tensor& inp, const Tensor* dout);
  virtual void fp8_block_matmul_impl(Tensor& out, const Tensor& a, const Tensor& a_scale_inv, const Tensor& b,
                                     const Tensor& b_scale_inv, bool b_tiles, const Tensor* bias, bool accumulate) = 0;
  // FP8 attention: the default refuses (a backend without the kernels).
  virtual void attention_fp8_forward_impl(Tensor& out, Tensor& lse, const Tensor& qkv, const Fp8AttentionMeta& m,
                                          int n_head, int n_kv_head);
  virtual void attention_fp8_backward_impl(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                           const Tensor& lse, const Fp8AttentionMeta& m, int n_head, int n_kv_head);
  // MoE: the CPU and CUDA backends implement these; the defaults stop with
  // an error naming the op, so a backend without the kernels refuses a MoE
  // model rather than run it on a partial path.
  virtual void moe_router_topk_impl(Tensor& probs, Tensor& indices, const Tensor& logits, const Tensor* expert_bias,
                                    const MoeRouting& r);
  virtual void moe_router_topk_backward_impl(Tensor& dlogits, const Tensor& dprobs, const Tensor& logits,
                                             const Tensor& indices, const MoeRouting& r);
  virtual void moe_aux_loss_impl(Tensor* dlogits, Tensor& losses, const Tensor& logits, const MoeAuxLoss& a);
  virtual void moe_permute_map_impl(Tensor& row_map, Tensor& tokens_per_expert, const Tensor& indices,
                                    const Tensor& probs, int64_t num_experts, int64_t capacity, bool drop_by_probs);
  virtual void moe_permute_impl(Tensor& out, const Tensor& inp, const Tensor& row_map, int topk);
  virtual void moe_permute_backward_impl(Tensor& dinp, const Tensor& dout, const Tensor& row_map, int topk);
  virtual void moe_unpermute_impl(Tensor& out, const Tensor& inp, const Tensor& row_map, const Tensor& probs);
  virtual void moe_unpermute_backward_impl(Tensor& dinp, Tensor& dprobs, const Tensor& dout, const Tensor& inp,
                                           const Tensor& row_map, const Tensor& probs);
  // Grouped matmuls: the defaults loop over the groups with matmul_forward /
  // matmul_backward (any backend runs them).
  virtual void grouped_matmul_forward_impl(Tensor& out, const Tensor& inp, const std::vector<const Tensor*>& weights,
                                           const std::vector<int64_t>& rows);
  virtual void grouped_matmul_backward_data_impl(Tensor& dinp, const Tensor& dout,
                                                 const std::vector<const Tensor*>& weights,
                                                 const std::vector<int64_t>& rows);
};

}  // namespace tripod::backend
