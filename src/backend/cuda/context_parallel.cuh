// Launchers of context parallelism's ops (CUDA versions of backend/cpu's
// attention_block.cpp and rope.cpp at given positions; contracts in
// backend/ops.h): the K/V column copy between a qkv (B, T, (NH + 2G) * HS)
// and a kv (B, T, 2G * HS) tensor, the block attention of one (query
// window, K/V window) pair of the ring, and the RoPE table at positions.
// Activations of dtype dt (f32, bf16, f16), math in f32, lse (B, NH, Tq) f32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace tripod::backend::cuda {

// A window pair: query rows [q_start, q_start + q_len) of qkv against K/V
// rows [kv_start, kv_start + kv_len) of kv; causal: the diagonal block.
struct BlockWindow {
  int64_t q_start, q_len, kv_start, kv_len;
  bool causal;
};

// Largest head size the block kernels take (a warp holds a row, HS / 32
// elements per lane).
constexpr int kBlockMaxHS = 256;

// from_qkv: kv = the K/V columns of qkv; else those columns of qkv = kv.
void attention_kv_copy(void* dst, const void* src, int64_t B, int64_t T, int NH, int G, int HS, bool from_qkv,
                       DType dt, cudaStream_t stream);

// out row r = inp row index[r] (i32 on the device), rows of row_bytes bytes
// (a multiple of 2).
void gather_rows(void* out, const void* inp, const int32_t* index, int64_t rows, int64_t row_bytes,
                 cudaStream_t stream);

// out (B, Tq, NH * HS), lse (B, NH, Tq): the window's query rows written, or
// merged by log-sum-exp with what they hold (accumulate).
void attention_block_forward(void* out, float* lse, const void* qkv, const void* kv, int64_t B, int64_t Tq,
                             int64_t Tk, int NH, int G, int HS, const BlockWindow& w, bool accumulate, DType dt,
                             cudaStream_t stream);

// dqkv's Q columns of the window rows += dQ; dkv's window rows += dK, dV.
// scratch: B * NH * q_len floats (D_i = dout_i . out_i).
void attention_block_backward(void* dqkv, void* dkv, const void* dout, const void* qkv, const void* kv,
                              const void* out, const float* lse, int64_t B, int64_t Tq, int64_t Tk, int NH, int G,
                              int HS, const BlockWindow& w, float* scratch, DType dt, cudaStream_t stream,
                              bool deterministic = false);

// cuDNN's block result o (B, w.q_len, NH * HS) and l (B, NH, w.q_len) into
// the window rows of out (B, Tq, NH * HS) and lse (B, NH, Tq): merged by
// log-sum-exp (accumulate) or copied.
void attention_block_merge(void* out, float* lse, const void* o, const float* l, int64_t B, int64_t Tq, int NH,
                           int HS, const BlockWindow& w, bool accumulate, DType dt, cudaStream_t stream);
// dst (B rows-blocks at dst_batch apart, rows dst_row apart) += src (B, rows, width) compact.
void add_rows(void* dst, const void* src, int64_t B, int64_t rows, int64_t width, int64_t dst_batch,
              int64_t dst_row, DType dt, cudaStream_t stream);

// The (cos, sin) table of cuda::rope for rows t < T at angle positions[t] *
// base^(-2i/rot_dim) (double, rounded to f32 as the CPU reference):
// table (2, T, rot_dim / 2); positions i32 (T) on the device.
void rope_positions_table(float* table, const int32_t* positions, int64_t T, int rot_dim, float base,
                          cudaStream_t stream);

}  // namespace tripod::backend::cuda
