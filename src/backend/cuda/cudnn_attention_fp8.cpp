// FP8 causal attention on cuDNN's fused FP8 flash attention (see
// cudnn_attention.cuh; the ops' contract is backend/ops.h
// attention_fp8_forward/backward, the CPU reference
// backend/cpu/fp8_attention.cpp).
//
// NOTE [cuDNN FP8 attention graphs]
// cuDNN's runtime fusion engine recognises the FP8 flash-attention pattern
// (the one cudnn-frontend's FP8 SDPA nodes expand into), on Hopper for head
// size 128 with FP8 outputs. Per-tensor scales are f32 device tensors
// [1,1,1,1]; amaxes come out as f32 [1,1,1,1] (written, not accumulated:
// the caller folds them into its own). Layouts as the bf16 graphs (Shapes).
// Forward:  S = Q8 K8^T * scale * descale_q * descale_k; causal mask;
//           M = rowmax S, E = exp(S - M), L = rowsum E, stats = M + log L,
//           P = E / L;  amax_s = amax(P);  P8 = E4M3(P * scale_s);
//           O = P8 V8 * descale_s * descale_v;  amax_o = amax(O);
//           O8 = E4M3(O * scale_o).
// Backward: Dsum = rowsum(dO8 * O8) * descale_dO * descale_O;
//           S as forward, masked; P = exp(S - stats); P8 = E4M3(P * scale_s);
//           dV = P8^T dO8 (summed over the group) * descale_s * descale_dO;
//           dP = dO8 V8^T * descale_dO * descale_v;
//           dS = (dP - Dsum) * P * scale;  amax_dp = amax(dS);
//           dS8 = fmt(dS * scale_dp) (dO's format);
//           dQ = dS8 K8 * descale_dp * descale_k;
//           dK = dS8^T Q8 (summed over the group) * descale_dp * descale_q;
//           each of dQ, dK, dV: amax, then fmt(x * scale_dqkv).
// Several graph variants are tried (index math in f32 or i32, the row sum
// Dsum virtual or in the caller's scratch), the first that yields a plan
// is cached per shape, as are failures.
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/cudnn_attention.cuh"
#include "backend/cuda/cudnn_attention_graph.h"
#include "backend/cuda/cudnn_graph.h"
#include "backend/cuda/cuda_check.h"
#include "backend/op_args.h"

namespace tripod::backend::cuda {

#if TRIPOD_HAVE_CUDNN_GRAPH

namespace {

using namespace cudnn_sdpa;

cudnnDataType_t fp8_type(DType dt) { return dt == DType::E5M2 ? CUDNN_DATA_FP8_E5M2 : CUDNN_DATA_FP8_E4M3; }

struct Fp8Plan {
  std::unique_ptr<Graph> graph;
  std::string error;
  std::vector<int64_t> uids;  // in the order of the pointers execute() is given
  bool real_rowsum = false;
};

struct Fp8Key {
  int device, grad_dtype, kind;  // kind 0 forward, 1 backward
  std::vector<int64_t> shape;
  bool operator<(const Fp8Key& o) const {
    return std::tie(device, grad_dtype, kind, shape) < std::tie(o.device, o.grad_dtype, o.kind, o.shape);
  }
};

std::mutex g_fp8_mu;
std::map<Fp8Key, Fp8Plan> g_fp8_plans;

Dims one() { return {1, 1, 1, 1}; }

// A device scalar (scale, descale, amax): f32 [1,1,1,1].
int64_t dev_scalar(Graph& g) { return g.tensor({CUDNN_DATA_FLOAT, one(), one()}); }

int64_t vt(Graph& g, cudnnDataType_t t, const Dims& d, const Dims& s) { return g.virtual_tensor(t, d, s); }

// y = x * b (f32 virtual of x's shape unless `out` is given).
int64_t mul(Graph& g, int64_t x, int64_t b, const Dims& d, const Dims& s, int64_t out = 0) {
  if (!out) out = vt(g, CUDNN_DATA_FLOAT, d, s);
  g.pointwise(CUDNN_POINTWISE_MUL, x, out, b);
  return out;
}

// S = Q K^T * attn_scale * descale_q * descale_k (f32), causal-masked.
int64_t scaled_scores(Graph& g, const Shapes& sh, int64_t q, int64_t kt, int64_t attn_scale, int64_t descale_q,
                      int64_t descale_k, int variant) {
  const Dims sd = sh.s_dims(), ss = sh.s_strides();
  int64_t s = vt(g, CUDNN_DATA_FLOAT, sd, ss);
  g.matmul(q, kt, s);
  s = mul(g, s, attn_scale, sd, ss);
  s = mul(g, s, descale_q, sd, ss);
  s = mul(g, s, descale_k, sd, ss);
  return causal_mask(g, sh, s, variant & 1);
}

// An FP8 GEMM's epilogue (cudnn-frontend's matmul_fp8): the f32
// accumulator acc (summed over each group's query heads into dims d first
// when group_sum) times both descales; its amax; times scale into the FP8
// tensor out.
void fp8_epilogue(Graph& g, int64_t acc, bool group_sum, const Dims& d, const Dims& s, int64_t descale_a,
                  int64_t descale_b, int64_t scale, int64_t out, int64_t amax) {
  if (group_sum) {
    const int64_t summed = vt(g, CUDNN_DATA_FLOAT, d, s);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, acc, summed);
    acc = summed;
  }
  acc = mul(g, acc, descale_a, d, s);
  acc = mul(g, acc, descale_b, d, s);
  mul(g, acc, scale, d, s, out);
  g.reduction(CUDNN_REDUCE_TENSOR_AMAX, acc, amax);
}

// uids: q, k^T, v, o, stats, descale_q, descale_k, descale_v, scale_s, descale_s, scale_o, amax_s, amax_o
Fp8Plan build_fp8_forward(const Shapes& sh, int variant) {
  Fp8Plan p;
  p.graph = std::make_unique<Graph>();
  Graph& g = *p.graph;
  const cudnnDataType_t e4 = CUDNN_DATA_FP8_E4M3, F = CUDNN_DATA_FLOAT;
  const int64_t q = g.tensor({e4, sh.q_dims(), sh.q_str});
  const int64_t kt = g.tensor({e4, sh.kv_t_dims(), Shapes::t(sh.kv_str)});
  const int64_t v = g.tensor({e4, sh.kv_dims(), sh.kv_str});
  const int64_t o = g.tensor({e4, sh.q_dims(), sh.o_str});
  const int64_t stats = g.tensor({F, sh.row_dims(), sh.stats_str});
  const int64_t dq = dev_scalar(g), dk = dev_scalar(g), dv = dev_scalar(g);
  const int64_t scale_s = dev_scalar(g), descale_s = dev_scalar(g), scale_o = dev_scalar(g);
  const int64_t amax_s = dev_scalar(g), amax_o = dev_scalar(g);
  const int64_t attn_scale = g.scalar(1.f / std::sqrt(float(sh.D)));
  const Dims sd = sh.s_dims(), ss = sh.s_strides(), rd = sh.row_dims(), rs = sh.row_strides();

  const int64_t s = scaled_scores(g, sh, q, kt, attn_scale, dq, dk, variant);
  const int64_t mx = vt(g, F, rd, rs);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s, mx);
  const int64_t sub = vt(g, F, sd, ss);
  g.pointwise(CUDNN_POINTWISE_SUB, s, sub, mx);
  const int64_t e = vt(g, F, sd, ss);
  g.pointwise(CUDNN_POINTWISE_EXP, sub, e);
  const int64_t sum = vt(g, F, rd, rs);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  const int64_t lg = vt(g, F, rd, rs);
  g.pointwise(CUDNN_POINTWISE_LOG, sum, lg);
  g.pointwise(CUDNN_POINTWISE_ADD, mx, stats, lg);
  const int64_t prob = vt(g, F, sd, ss);
  g.pointwise(CUDNN_POINTWISE_DIV, e, prob, sum);
  g.reduction(CUDNN_REDUCE_TENSOR_AMAX, prob, amax_s);
  const int64_t p8 = mul(g, prob, scale_s, sd, ss, vt(g, e4, sd, ss));

  const Dims od = sh.q_dims(), os = {sh.H * sh.Tq * sh.D, sh.Tq * sh.D, sh.D, 1};
  const int64_t acc = vt(g, F, od, os);
  g.matmul(p8, v, acc);
  fp8_epilogue(g, acc, false, od, os, descale_s, dv, scale_o, o, amax_o);
  p.uids = {q, kt, v, o, stats, dq, dk, dv, scale_s, descale_s, scale_o, amax_s, amax_o};
  return p;
}

// uids: q, k^T, v^T, o, dO, stats, dq, dk, dv,
//       descale_q, descale_k, descale_v, descale_o, descale_dO, scale_s, descale_s, scale_dp, descale_dp,
//       scale_dq, scale_dk, scale_dv, amax_dp, amax_dq, amax_dk, amax_dv[, rowsum]
Fp8Plan build_fp8_backward(const Shapes& sh, DType grad, int variant) {
  Fp8Plan p;
  p.graph = std::make_unique<Graph>();
  p.real_rowsum = (variant & 2) != 0;
  Graph& g = *p.graph;
  const cudnnDataType_t e4 = CUDNN_DATA_FP8_E4M3, gt = fp8_type(grad), F = CUDNN_DATA_FLOAT;
  const int64_t q = g.tensor({e4, sh.q_dims(), sh.q_str});
  const int64_t kt = g.tensor({e4, sh.kv_t_dims(), Shapes::t(sh.kv_str)});
  const int64_t vtr = g.tensor({e4, sh.kv_t_dims(), Shapes::t(sh.kv_str)});
  const int64_t o = g.tensor({e4, sh.q_dims(), sh.o_str});
  const int64_t dout = g.tensor({gt, sh.q_dims(), sh.o_str});
  const int64_t stats = g.tensor({F, sh.row_dims(), sh.stats_str});
  const int64_t dq = g.tensor({gt, sh.q_dims(), sh.dq_str});
  const int64_t dk = g.tensor({gt, sh.kv_dims(), sh.dkv_str});
  const int64_t dv = g.tensor({gt, sh.kv_dims(), sh.dkv_str});
  const int64_t descale_q = dev_scalar(g), descale_k = dev_scalar(g), descale_v = dev_scalar(g);
  const int64_t descale_o = dev_scalar(g), descale_do = dev_scalar(g);
  const int64_t scale_s = dev_scalar(g), descale_s = dev_scalar(g);
  const int64_t scale_dp = dev_scalar(g), descale_dp = dev_scalar(g);
  const int64_t scale_dq = dev_scalar(g), scale_dk = dev_scalar(g), scale_dv = dev_scalar(g);
  const int64_t amax_dp = dev_scalar(g), amax_dq = dev_scalar(g), amax_dk = dev_scalar(g), amax_dv = dev_scalar(g);
  const int64_t attn_scale = g.scalar(1.f / std::sqrt(float(sh.D)));
  const Dims sd = sh.s_dims(), ss = sh.s_strides(), rd = sh.row_dims(), rs = sh.row_strides();
  const Dims qd = sh.q_dims(), qs = {sh.H * sh.Tq * sh.D, sh.Tq * sh.D, sh.D, 1};
  const bool grouped = sh.G != sh.H;

  // Dsum = rowsum(dO * O) * descale_dO * descale_O
  const int64_t prod = vt(g, F, qd, {sh.H * sh.Tq * sh.D, sh.Tq * sh.D, sh.H * sh.D, 1});
  g.pointwise(CUDNN_POINTWISE_MUL, dout, prod, o);
  int64_t dsum = vt(g, F, rd, rs);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, prod, dsum);
  dsum = mul(g, dsum, descale_do, rd, rs);
  int64_t rowsum = 0;
  if (p.real_rowsum) {
    rowsum = g.tensor({F, rd, rs});
    mul(g, dsum, descale_o, rd, rs, rowsum);
    dsum = rowsum;
  } else {
    dsum = mul(g, dsum, descale_o, rd, rs);
  }

  // P recomputed
  const int64_t s = scaled_scores(g, sh, q, kt, attn_scale, descale_q, descale_k, variant);
  const int64_t sub = vt(g, F, sd, ss);
  g.pointwise(CUDNN_POINTWISE_SUB, s, sub, stats);
  const int64_t e = vt(g, F, sd, ss);
  g.pointwise(CUDNN_POINTWISE_EXP, sub, e);

  // dK and dV: per query head first under grouped-query attention (the epilogue sums each group)
  const Dims kd = sh.kv_dims(), ks = {sh.G * sh.Tk * sh.D, sh.Tk * sh.D, sh.D, 1};
  const Dims fd = grouped ? sh.full_dims() : kd, fs = grouped ? sh.full_strides() : ks;

  // dV = P8^T dO
  const int64_t p8 = mul(g, e, scale_s, sd, ss, vt(g, e4, sd, ss));
  const int64_t p8t = vt(g, e4, sh.st_dims(), sh.st_strides());
  g.reshape(p8, p8t);
  const int64_t dv_acc = vt(g, F, fd, fs);
  g.matmul(p8t, dout, dv_acc);
  fp8_epilogue(g, dv_acc, grouped, kd, ks, descale_s, descale_do, scale_dv, dv, amax_dv);

  // dS = (dO V^T * descale_dO * descale_v - Dsum) * P * scale
  int64_t dp = vt(g, F, sd, ss);
  g.matmul(dout, vtr, dp);
  dp = mul(g, dp, descale_do, sd, ss);
  dp = mul(g, dp, descale_v, sd, ss);
  const int64_t d1 = vt(g, F, sd, ss);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, d1, dsum);
  int64_t ds = mul(g, d1, e, sd, ss);
  ds = mul(g, ds, attn_scale, sd, ss);
  g.reduction(CUDNN_REDUCE_TENSOR_AMAX, ds, amax_dp);
  const int64_t ds8 = mul(g, ds, scale_dp, sd, ss, vt(g, gt, sd, ss));

  // dQ = dS8 K8
  const int64_t k = vt(g, e4, sh.kv_dims(), sh.kv_str);
  g.reshape(kt, k);
  const int64_t dq_acc = vt(g, F, qd, qs);
  g.matmul(ds8, k, dq_acc);
  fp8_epilogue(g, dq_acc, false, qd, qs, descale_dp, descale_k, scale_dq, dq, amax_dq);

  // dK = dS8^T Q8
  const int64_t ds8t = vt(g, gt, sh.st_dims(), sh.st_strides());
  g.reshape(ds8, ds8t);
  const int64_t dk_acc = vt(g, F, fd, fs);
  g.matmul(ds8t, q, dk_acc);
  fp8_epilogue(g, dk_acc, grouped, kd, ks, descale_dp, descale_q, scale_dk, dk, amax_dk);

  p.uids = {q,         kt,        vtr,        o,        dout,     stats,    dq,      dk,      dv,
            descale_q, descale_k, descale_v,  descale_o, descale_do, scale_s, descale_s, scale_dp, descale_dp,
            scale_dq,  scale_dk,  scale_dv,   amax_dp,  amax_dq,  amax_dk,  amax_dv};
  if (p.real_rowsum) p.uids.push_back(rowsum);
  return p;
}

const Fp8Plan* fp8_plan_for(const Fp8Key& key, const Shapes& sh, DType grad, std::string* why) {
  return cached_plan<Fp8Plan, Fp8Key>(
      g_fp8_mu, g_fp8_plans, key, 4,
      [&](int variant) {
        if (key.kind == 0) return (variant & 2) ? Fp8Plan{} : build_fp8_forward(sh, variant);  // no row sum forward
        return build_fp8_backward(sh, grad, variant);
      },
      [&](const Fp8Plan& p, int variant) {
        return fmt::format("cuDNN {} FP8 attention {} plan B={} T={} NH={} G={} HS={}: graph variant {}, {}, "
                           "workspace {} bytes",
                           cudnn::version(), key.kind == 0 ? "forward" : "backward", sh.B, sh.Tq, sh.H, sh.G, sh.D,
                           variant, p.graph->engine_note(), p.graph->workspace_bytes());
      },
      why);
}

bool fp8_served(int HS, const void* const* ptrs, int n, std::string* why) {
  std::string reason = cudnn_fp8_attention_unserved(HS);
  for (int i = 0; i < n && reason.empty(); ++i)
    if (reinterpret_cast<uintptr_t>(ptrs[i]) % 16 != 0) reason = "pointer not 16-byte aligned";
  if (!reason.empty() && why) *why = reason;
  return reason.empty();
}

}  // namespace

std::string cudnn_fp8_attention_unserved(int64_t head_size) {
  std::string reason;
  if (!cudnn::available(&reason)) return reason;
  int dev = 0, major = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  // 9.19: the first cuDNN whose FP8 attention passed bench/kernels/
  // fp8_attention_bench's repeat checks (bit-equal codes across identical
  // calls, batch 1 to 4).
  return fp8_attention_limitation(cudnn::version(), major, head_size);
}

bool cudnn_attention_fp8_forward(void* out, float* lse, const void* qkv, int64_t B, int64_t T, int NH, int G, int HS,
                                 const Fp8AttentionScales& s, cudaStream_t stream, std::string* why) {
  const void* ptrs[] = {out, qkv, lse};
  if (!fp8_served(HS, ptrs, 3, why)) return false;
  int dev = 0;
  cudaGetDevice(&dev);
  const Shapes sh = Shapes::self(B, T, NH, G, HS);
  const Fp8Plan* p = fp8_plan_for({dev, 0, 0, sh.signature()}, sh, DType::E4M3, why);
  if (!p) return false;
  const int64_t koff = int64_t(NH) * HS, voff = koff + int64_t(G) * HS;
  char* base = static_cast<char*>(const_cast<void*>(qkv));
  auto f = [](const float* x) { return static_cast<void*>(const_cast<float*>(x)); };
  std::vector<void*> ptr = {base, base + koff, base + voff, out, lse,
                            f(s.qkv_descale), f(s.qkv_descale), f(s.qkv_descale), f(s.s_scale), f(s.s_descale),
                            f(s.o_scale), s.amax[0], s.amax[1]};
  try {
    void* ws = workspace(dev, size_t(p->graph->workspace_bytes()), stream);
    p->graph->execute(cudnn::handle_for_current_device(), stream, p->uids, ptr, ws);
  } catch (const cudnn::GraphError& e) {
    fail(std::string("cuDNN FP8 attention forward: ") + e.what());
  }
  return true;
}

bool cudnn_attention_fp8_backward(void* dqkv, DType grad, const void* dout, const void* qkv, const void* out,
                                  const float* lse, float* scratch, int64_t B, int64_t T, int NH, int G, int HS,
                                  const Fp8AttentionScales& s, cudaStream_t stream, std::string* why) {
  const void* ptrs[] = {dqkv, dout, qkv, out, lse, scratch};
  if (!fp8_served(HS, ptrs, 6, why)) return false;
  int dev = 0;
  cudaGetDevice(&dev);
  const Shapes sh = Shapes::self(B, T, NH, G, HS);
  const Fp8Plan* p = fp8_plan_for({dev, int(grad), 1, sh.signature()}, sh, grad, why);
  if (!p) return false;
  const int64_t C = int64_t(NH) * HS, voff = C + int64_t(G) * HS;
  char* in = static_cast<char*>(const_cast<void*>(qkv));
  char* d = static_cast<char*>(dqkv);
  auto f = [](const float* x) { return static_cast<void*>(const_cast<float*>(x)); };
  std::vector<void*> ptr = {in, in + C, in + voff, const_cast<void*>(out), const_cast<void*>(dout), f(lse),
                            d, d + C, d + voff,
                            f(s.qkv_descale), f(s.qkv_descale), f(s.qkv_descale), f(s.o_descale), f(s.dout_descale),
                            f(s.s_scale), f(s.s_descale), f(s.dp_scale), f(s.dp_descale),
                            f(s.dqkv_scale), f(s.dqkv_scale), f(s.dqkv_scale),
                            s.amax[0], s.amax[1], s.amax[2], s.amax[3]};
  if (p->real_rowsum) ptr.push_back(scratch);
  try {
    void* ws = workspace(dev, size_t(p->graph->workspace_bytes()), stream);
    p->graph->execute(cudnn::handle_for_current_device(), stream, p->uids, ptr, ws);
  } catch (const cudnn::GraphError& e) {
    fail(std::string("cuDNN FP8 attention backward: ") + e.what());
  }
  return true;
}

#else  // !TRIPOD_HAVE_CUDNN_GRAPH

bool cudnn_attention_fp8_forward(void*, float*, const void*, int64_t, int64_t, int, int, int,
                                 const Fp8AttentionScales&, cudaStream_t, std::string* why) {
  if (why) *why = "built without cudnn_graph.h";
  return false;
}
bool cudnn_attention_fp8_backward(void*, DType, const void*, const void*, const void*, const float*, float*, int64_t,
                                  int64_t, int, int, int, const Fp8AttentionScales&, cudaStream_t,
                                  std::string* why) {
  if (why) *why = "built without cudnn_graph.h";
  return false;
}

#endif

}  // namespace tripod::backend::cuda
