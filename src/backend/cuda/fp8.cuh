// Launchers of the FP8 ops of backend/ops.h (CUDA version of backend/cpu/fp8.cpp
// and fp8_block.cpp): the casts (fp8.cu, fp8_block.cu) and the FP8 GEMMs
// through cuBLASLt (fp8_matmul.cpp).
// FP8 tensors are bytes of dtype E4M3 or E5M2; activations are f32, bf16 or
// f16 (`dt`); scale, scale_inv and amax are device pointers to one float.
// The conversions match tensor/dtype.h's f32_to_fp8 / fp8_to_f32 bit for bit.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "tensor/dtype.h"

namespace tripod::backend::cuda {

// out(R, C) = fp8(f32(in) * scale); out_t(C, R) = its transpose when not
// null (one pass: 8 x 8 elements per thread, transposed through shared
// memory, NOTE [FP8 cast + transpose] in fp8.cu); amax = max(amax, max |in|).
void fp8_cast_transpose(void* out, void* out_t, DType fp8, float* amax, const void* in, DType dt,
                        const float* scale, int64_t R, int64_t C, cudaStream_t stream);
// The SwiGLU casts (NOTE [FP8 SwiGLU casts] in fp8_swiglu.cu): dout null: out (R, F),
// out_t (F, R) = the cast of swiglu(inp (R, 2F)); else out (R, 2F), out_t
// (2F, R) = the cast of its backward for dout (R, F). Returns false, having
// done nothing, for shapes or alignments the kernel does not take.
bool fp8_swiglu_cast_transpose(void* out, void* out_t, DType fp8, float* amax, const void* inp, const void* dout,
                               DType dt, const float* scale, int64_t R, int64_t F, cudaStream_t stream);
// out(n) = f32(in) * scale_inv, rounded to dt.
void fp8_dequantize(void* out, DType dt, const void* in, DType fp8, const float* scale_inv, int64_t n,
                    cudaStream_t stream);
// The FP8 GEMM of any shape without cuBLASLt (one thread per output, f32
// accumulation): for shapes cuBLASLt's FP8 kernels do not take.
void fp8_matmul_fallback(void* out, DType dt, const void* a, DType a_fp8, const float* a_scale_inv,
                         const void* b, DType b_fp8, const float* b_scale_inv, const void* bias,
                         bool accumulate, int64_t N, int64_t K, int64_t OC, cudaStream_t stream);

// Block scaling (backend/ops.h fp8_block_cast; NOTE [FP8 block casts] in
// fp8_block.cu). in (R, C): out (R, C) in 1x128 blocks along C, scale_inv
// [ceil(C/128)][R]; with out_t (C, R), blocks of 128 rows of each column,
// scale_inv_t [ceil(R/128)][C] (both null, or both given). Scales are f32 on
// the device.
void fp8_block_cast(void* out, float* scale_inv, void* out_t, float* scale_inv_t, DType fp8, const void* in,
                    DType dt, int64_t R, int64_t C, cudaStream_t stream);
// in (R, C) in 128x128 tiles: out (R, C), out_t (C, R) the same codes
// transposed, scale_inv [ceil(R/128)][ld(C)], scale_inv_t [ceil(C/128)][ld(R)]
// (ld: backend/ops.h fp8_tile_ld; the padding written as 1).
void fp8_block_cast_tiles(void* out, void* out_t, float* scale_inv, float* scale_inv_t, DType fp8, const void* in,
                          DType dt, int64_t R, int64_t C, cudaStream_t stream);
// fp8_block_cast (with the transpose) of swiglu_forward(inp (R, 2F)), or of
// swiglu_backward(inp, dout (R, F)) when dout is given, computed in the cast
// (backend/ops.h fp8_swiglu_block_cast). Needs R and F multiples of 8 and
// 16-byte aligned inputs; other calls return false.
bool fp8_swiglu_block_cast(void* out, float* scale_inv, void* out_t, float* scale_inv_t, DType fp8, const void* inp,
                           const void* dout, DType dt, int64_t R, int64_t F, cudaStream_t stream);
// fp8_block_matmul without cuBLASLt (one thread per output; each 128-wide K
// block's f32 sum times its two scale_invs, added in f32): any shape.
void fp8_block_matmul_fallback(void* out, DType dt, const void* a, DType a_fp8, const float* a_scale_inv,
                               const void* b, DType b_fp8, const float* b_scale_inv, bool b_tiles, const void* bias,
                               bool accumulate, int64_t N, int64_t K, int64_t OC, cudaStream_t stream);

// dst = max(dst, src[0], src[stride], ..., src[(n-1) stride]) (NaN skipped, as
// fmaxf): folds amaxes written elsewhere (cuDNN's FP8 attention) into an
// accumulating one.
void fp8_amax_fold(float* dst, const float* src, int n, int stride, cudaStream_t stream);

// Grouped-query FP8 attention backward as multi-head (cuda_backend.cpp):
// expand_kv writes rows of [Q | K | V] with H heads each (K, V head g
// repeated for its group; D a multiple of 16) from qkv rows of H + 2G heads;
// sum_kv_groups writes qkv-layout rows from such gradient rows, dK and dV
// of each group summed (decoded, in f32) and cast again (codes of one
// scale), amax = max(amax, max |sum| / *scale) over them.
void fp8_attention_expand_kv(void* dst, const void* src, int64_t rows, int H, int G, int D, cudaStream_t stream);
void fp8_attention_sum_kv_groups(void* dst, const void* src, DType fp8, const float* scale, float* amax, int64_t rows,
                                 int H, int G, int D, cudaStream_t stream);

// The scaling update of M tensors (backend/ops.h fp8_update_scale): scale,
// scale_inv, amax (M) floats on the device, history (M, H) or null.
void fp8_update_scale(float* scale, float* scale_inv, float* history, const float* amax, int64_t M, int64_t H,
                      float fp8_max, int margin, bool use_max, cudaStream_t stream);

// cuBLASLt's FP8 GEMM, one per backend: its own handle and workspace
// (allocated at the first call, so a run without FP8 pays nothing) and a
// cache of chosen algorithms per shape, dtypes and alignment.
class Fp8Gemm {
 public:
  Fp8Gemm() = default;
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  // The backend's FP8 GEMMs (backend/ops.h fp8_matmul, fp8_block_matmul):
  // run() / run_block() where cuBLASLt takes the call (run()'s f32 out gets
  // its bias added after the GEMM), else fp8_matmul_fallback /
  // fp8_block_matmul_fallback. Any shape.
  void matmul(void* out, DType dt, const void* a, DType a_fp8, const float* a_scale_inv, const void* b, DType b_fp8,
              const float* b_scale_inv, const void* bias, bool accumulate, int64_t N, int64_t K, int64_t OC,
              cudaStream_t stream, bool fast_accum);
  void matmul_block(void* out, DType dt, const void* a, DType a_fp8, const float* a_scale_inv, const void* b,
                    DType b_fp8, const float* b_scale_inv, bool b_tiles, const void* bias, bool accumulate, int64_t N,
                    int64_t K, int64_t OC, cudaStream_t stream);

  // out(N, OC) (=, or += with accumulate) (a(N, K) * a_scale_inv) @
  // (b(OC, K) * b_scale_inv)^T (+ bias(OC), of out's dtype), f32 accumulation
  // (fast_accum: Hopper's faster FP8 accumulation without the f32
  // promotion, CUBLASLT_MATMUL_DESC_FAST_ACCUM). Returns false, having done
  // nothing, when cuBLASLt cannot take the call (K or OC not a multiple of
  // 16, pointers not 16-byte aligned, no algorithm); the caller falls back.
  // An f32 out takes no fused bias (cuBLASLt's FP8 bias epilogue wants a
  // bf16 bias there): the caller adds it.
  bool run(void* out, DType dt, const void* a, DType a_fp8, const float* a_scale_inv, const void* b,
           DType b_fp8, const float* b_scale_inv, const void* bias, bool accumulate, int64_t N, int64_t K,
           int64_t OC, cudaStream_t stream, bool fast_accum = false);
  // The block-scaled GEMM (backend/ops.h fp8_block_matmul): a in 1x128
  // blocks (a_scale_inv [ceil(K/128)][N]), b in 128x128 tiles (b_tiles:
  // [ceil(OC/128)][fp8_tile_ld(K)]) or 1x128 blocks ([ceil(K/128)][OC]), the
  // layouts of cuBLASLt's VEC128_32F and BLK128x128_32F scale modes, passed
  // as they are. f32 accumulation promoted per block (no fast accumulation
  // with block scaling). The bias goes through the BIAS epilogue where
  // cuBLASLt takes it, else (and for an f32 out) it is added after the GEMM.
  // Returns false, having done nothing, when cuBLASLt cannot take the call
  // (K or OC not a multiple of 16, N not a multiple of 4, operands or scale
  // arrays not 16-byte aligned, no algorithm); the caller falls back.
  bool run_block(void* out, DType dt, const void* a, DType a_fp8, const float* a_scale_inv, const void* b,
                 DType b_fp8, const float* b_scale_inv, bool b_tiles, const void* bias, bool accumulate, int64_t N,
                 int64_t K, int64_t OC, cudaStream_t stream);

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, int, int, int, bool, bool, bool, int>;
  // run_block's: N, K, OC, dtypes (out, a, b), b's scale mode (tiles), fused
  // bias, accumulate, alignment.
  using BlockKey = std::tuple<int64_t, int64_t, int64_t, int, int, int, bool, bool, bool, int>;
  bool try_block(const BlockKey& key, void* out, DType dt, const void* a, DType a_fp8, const float* a_scale_inv,
                 const void* b, DType b_fp8, const float* b_scale_inv, bool b_tiles, const void* bias,
                 bool accumulate, int64_t N, int64_t K, int64_t OC, int align, cudaStream_t stream);
  void init();
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = size_t(32) << 20;
  float* scales_ = nullptr;  // 16-byte aligned copies of misaligned scale pointers
  std::map<Key, cublasLtMatmulAlgo_t> algos_;
  std::map<Key, bool> unsupported_;
  std::map<BlockKey, cublasLtMatmulAlgo_t> block_algos_;
  std::map<BlockKey, bool> block_unsupported_;
};

}  // namespace tripod::backend::cuda
