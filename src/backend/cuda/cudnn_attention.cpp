// Causal attention on cuDNN's fused flash attention (see cudnn_attention.cuh).
//
// NOTE [cuDNN attention graphs]
// cuDNN serves fused attention through its runtime fusion engines, which
// recognise an operation graph of primitive ops (the pattern of cuDNN's
// "flash fused attention" support surface); the graphs below are that
// pattern for causal, dropout-free self-attention with saved stats.
// Layouts: qkv (B, T, NH + 2G, HS) gives Q as a (B, NH, T, HS) view and K, V
// as (B, G, T, HS) views, all with strides (T*W, HS, W, 1) (W = (NH+2G)*HS)
// at offsets 0, NH*HS, (NH+G)*HS; K^T and V^T swap the last two dims and
// strides. out/dout are (B, NH, T, HS) views of (B, T, C), C = NH*HS.
// Grouped-query attention (G < NH) is the same graph: cuDNN's matmuls take
// K/V with G heads against Q with NH (head h uses K/V head h / (NH/G)); in
// the backward, dK and dV come out per query head into virtual
// (B, NH, T, HS) tensors and a reduction sums each group into the G heads of
// dqkv (the pattern of cuDNN's own SDPA backward for GQA).
// Forward:  S = Q K^T * scale; causal mask (row >= col, else -inf);
//           M = rowmax S, E = exp(S - M), L = rowsum E;
//           stats = M + log L (the log-sum-exp, saved), P = E / L (bf16/f16);
//           O = P V.
// Backward: Dsum = rowsum(dO * O) (f32, into the caller's scratch);
//           E = exp(mask(Q K^T * scale - stats)) (= P, recomputed);
//           dV = E^T dO; dS = (dO V^T - Dsum) * E * scale;
//           dK = dS^T Q; dQ = dS K.
// dQ is either a plain matmul into dqkv (cuDNN keeps dS in its workspace and
// runs its deterministic algorithm) or an f32 accumulator in our workspace
// (atomics across key tiles) copied out by an identity op. Plans are built
// once per shape (first call; runtime-compiled engines take a moment) and
// cached with their failures.
#include "backend/cuda/cudnn_attention.cuh"

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>

#include "backend/cuda/allocator.cuh"
#include "backend/cuda/context_parallel.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cudnn_attention_graph.h"
#include "backend/cuda/cudnn_graph.h"
#include "base/log.h"
#include "tensor/dtype.h"

namespace tripod::backend::cuda {

void note_attention_path(const std::string& message) {
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (seen.insert(message).second) log::info("{}", message);
}

#if TRIPOD_HAVE_CUDNN_GRAPH

namespace cudnn_sdpa {

namespace {
struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};
std::map<int, Workspace> g_ws;
}  // namespace

void* workspace(int device, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  Workspace& w = g_ws[device];
  if (w.bytes < bytes) {
    Allocator& a = caching_allocator();
    if (w.ptr) {
      cudaStreamSynchronize(stream);  // the old buffer may still be in use by queued work
      a.deallocate(w.ptr, w.bytes, Device::cuda(device));
    }
    w.ptr = a.allocate(bytes, Device::cuda(device));
    w.bytes = bytes;
  }
  return w.ptr;
}

void log_plan(const std::string& message) { log::info("{}", message); }

float masked_value() {
  // cuDNN before 9.10 prefers the lowest finite float for masked scores.
  return cudnn::version() < 91000 ? std::numeric_limits<float>::lowest()
                                  : -std::numeric_limits<float>::infinity();
}

// Causal mask on score tensor s (F32 [B,H,Tq,Tk]): keeps row >= col; s
// itself when the shapes are not causal.
// variant: 0 = the graph as described in the NOTE; 1 = integer math for the
// index ops and an f32 view of K (tried when 0 yields no plan).
// The masked value's scalar exists only in a causal graph: execute() puts
// every scalar in the variant pack, and a uid that no operation reads makes
// cuDNN refuse the pack (CUDNN_STATUS_BAD_PARAM_NULL_POINTER from
// isCompatibleVariantPack, as a non-causal block's forward did).
int64_t causal_mask(Graph& g, const Shapes& sh, int64_t s, int variant) {
  if (!sh.causal) return s;
  const int64_t masked = g.scalar(masked_value());
  int64_t row = g.virtual_tensor(CUDNN_DATA_INT32, sh.s_dims(), sh.s_strides());
  int64_t col = g.virtual_tensor(CUDNN_DATA_INT32, sh.s_dims(), sh.s_strides());
  int64_t keep = g.virtual_tensor(CUDNN_DATA_BOOLEAN, sh.s_dims(), sh.s_strides());
  int64_t out = g.virtual_tensor(CUDNN_DATA_FLOAT, sh.s_dims(), sh.s_strides());
  const cudnnDataType_t index_math = variant == 0 ? CUDNN_DATA_FLOAT : CUDNN_DATA_INT32;
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, row, 0, 0, index_math, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, col, 0, 0, index_math, 3);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, keep, col, 0, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, out, masked, keep);
  return out;
}

}  // namespace cudnn_sdpa

namespace {

using cudnn::Graph;
using namespace cudnn_sdpa;

struct Plan {
  std::unique_ptr<Graph> graph;
  std::string error;  // non-empty: no plan for this shape
  // uids, in the order of the pointers execute() is given
  std::vector<int64_t> uids;
  int64_t accum_bytes = 0;  // f32 dQ accumulator placed after cuDNN's workspace
  bool deterministic = false;
};

struct Key {
  int device, dtype, kind;  // kind: 0 forward, 1 backward deterministic dQ, 2 backward atomic dQ
  std::vector<int64_t> shape;  // Shapes::signature()
  bool operator<(const Key& o) const {
    return std::tie(device, dtype, kind, shape) < std::tie(o.device, o.dtype, o.kind, o.shape);
  }
};

std::mutex g_mu;
std::map<Key, Plan> g_plans;

cudnnDataType_t cudnn_type(DType dt) { return dt == DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF; }

// uids order: q, k^T, v, o, stats
Plan build_forward(const Shapes& sh, DType dt, int variant) {
  Plan p;
  p.graph = std::make_unique<Graph>();
  Graph& g = *p.graph;
  const cudnnDataType_t io = cudnn_type(dt), F = CUDNN_DATA_FLOAT;
  int64_t q = g.tensor({io, sh.q_dims(), sh.q_str});
  int64_t kt = g.tensor({io, sh.kv_t_dims(), Shapes::t(sh.kv_str)});
  int64_t v = g.tensor({io, sh.kv_dims(), sh.kv_str});
  int64_t o = g.tensor({io, sh.q_dims(), sh.o_str});
  int64_t stats = g.tensor({F, sh.row_dims(), sh.stats_str});
  int64_t scale = g.scalar(1.f / std::sqrt(float(sh.D)));

  int64_t s = g.virtual_tensor(F, sh.s_dims(), sh.s_strides());
  g.matmul(q, kt, s);
  int64_t ss = g.virtual_tensor(F, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, s, ss, scale);
  int64_t sm = causal_mask(g, sh, ss, variant);
  int64_t mx = g.virtual_tensor(F, sh.row_dims(), sh.row_strides());
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, sm, mx);
  int64_t sub = g.virtual_tensor(F, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_SUB, sm, sub, mx);
  int64_t e = g.virtual_tensor(F, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_EXP, sub, e);
  int64_t sum = g.virtual_tensor(F, sh.row_dims(), sh.row_strides());
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  int64_t lg = g.virtual_tensor(F, sh.row_dims(), sh.row_strides());
  g.pointwise(CUDNN_POINTWISE_LOG, sum, lg);
  g.pointwise(CUDNN_POINTWISE_ADD, mx, stats, lg);
  int64_t prob = g.virtual_tensor(io, sh.s_dims(), sh.s_strides());  // P in the io type feeds the second matmul
  g.pointwise(CUDNN_POINTWISE_DIV, e, prob, sum);
  g.matmul(prob, v, o);
  p.uids = {q, kt, v, o, stats};
  return p;
}

// uids order: q, k^T, v^T, o, dO, stats, dq, dk, dv, rowsum[, dq accumulator]
Plan build_backward(const Shapes& sh, DType dt, bool deterministic, int variant) {
  Plan p;
  p.graph = std::make_unique<Graph>();
  p.deterministic = deterministic;
  Graph& g = *p.graph;
  const cudnnDataType_t io = cudnn_type(dt), F = CUDNN_DATA_FLOAT;
  int64_t q = g.tensor({io, sh.q_dims(), sh.q_str});
  int64_t kt = g.tensor({io, sh.kv_t_dims(), Shapes::t(sh.kv_str)});
  int64_t vt = g.tensor({io, sh.kv_t_dims(), Shapes::t(sh.kv_str)});
  int64_t o = g.tensor({io, sh.q_dims(), sh.o_str});
  int64_t dout = g.tensor({io, sh.q_dims(), sh.o_str});
  int64_t stats = g.tensor({F, sh.row_dims(), sh.stats_str});
  int64_t dq = g.tensor({io, sh.q_dims(), sh.dq_str});
  int64_t dk = g.tensor({io, sh.kv_dims(), sh.dkv_str});
  int64_t dv = g.tensor({io, sh.kv_dims(), sh.dkv_str});
  // GQA: dK, dV per query head first, then summed over each group.
  const bool grouped = sh.G != sh.H;
  auto per_query_head = [&](int64_t dst) {
    return grouped ? g.virtual_tensor(io, sh.full_dims(), sh.full_strides()) : dst;
  };
  auto sum_groups = [&](int64_t full, int64_t dst) {
    if (grouped) g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, dst);
  };
  int64_t rowsum = g.tensor({F, sh.row_dims(), sh.row_strides()});
  int64_t scale = g.scalar(1.f / std::sqrt(float(sh.D)));
  int64_t one = g.scalar(1.f);

  // rowsum = sum_d dO * O
  int64_t prod = g.virtual_tensor(F, sh.q_dims(), {sh.H * sh.Tq * sh.D, sh.Tq * sh.D, sh.H * sh.D, 1});
  g.pointwise(CUDNN_POINTWISE_MUL, dout, prod, o);
  int64_t red = g.virtual_tensor(F, sh.row_dims(), sh.row_strides());
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, prod, red);
  g.pointwise(CUDNN_POINTWISE_MUL, red, rowsum, one);

  // P recomputed from the stats
  int64_t s = g.virtual_tensor(F, sh.s_dims(), sh.s_strides());
  g.matmul(q, kt, s);
  int64_t ss = g.virtual_tensor(F, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, s, ss, scale);
  int64_t sub = g.virtual_tensor(F, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_SUB, ss, sub, stats);
  int64_t sm = causal_mask(g, sh, sub, variant);
  int64_t e = g.virtual_tensor(F, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_EXP, sm, e);

  // dV = P^T dO
  int64_t pt = g.virtual_tensor(io, sh.st_dims(), sh.st_strides());
  g.reshape(e, pt);
  int64_t dv_full = per_query_head(dv);
  g.matmul(pt, dout, dv_full);
  sum_groups(dv_full, dv);

  // dS = (dO V^T - rowsum) * P * scale
  int64_t dp = g.virtual_tensor(F, sh.s_dims(), sh.s_strides());
  g.matmul(dout, vt, dp);
  int64_t d1 = g.virtual_tensor(F, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_SUB, dp, d1, rowsum);
  int64_t d2 = g.virtual_tensor(F, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, d1, d2, e);
  int64_t ds = g.virtual_tensor(F, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, d2, ds, scale);

  // dK = dS^T Q
  int64_t dst = g.virtual_tensor(io, sh.st_dims(), sh.st_strides());
  g.reshape(ds, dst);
  int64_t dk_full = per_query_head(dk);
  g.matmul(dst, q, dk_full);
  sum_groups(dk_full, dk);

  // dQ = dS K
  int64_t k = g.virtual_tensor(variant == 0 ? io : F, sh.kv_dims(), sh.kv_str);
  g.reshape(kt, k);
  p.uids = {q, kt, vt, o, dout, stats, dq, dk, dv, rowsum};
  if (deterministic) {
    g.matmul(ds, k, dq);
  } else {
    int64_t acc = g.tensor({F, sh.q_dims(), {sh.H * sh.Tq * sh.D, sh.Tq * sh.D, sh.D, 1}});
    g.matmul(ds, k, acc);
    g.pointwise(CUDNN_POINTWISE_IDENTITY, acc, dq);
    p.uids.push_back(acc);
    p.accum_bytes = sh.B * sh.H * sh.Tq * sh.D * int64_t(sizeof(float));
  }
  return p;
}

bool served(DType dt, int HS, int64_t C, const void* const* ptrs, int n, std::string* why) {
  std::string reason;
  if (!cudnn::available(&reason)) {
    if (why) *why = reason;
    return false;
  }
  if (dt != DType::BF16 && dt != DType::F16) reason = "dtype not bf16/f16";
  else if (HS % 8 != 0 || HS > 256) reason = "head size " + std::to_string(HS) + " (multiples of 8 up to 256)";
  else if (C % 8 != 0) reason = "C not a multiple of 8";
  for (int i = 0; i < n && reason.empty(); ++i)
    if (reinterpret_cast<uintptr_t>(ptrs[i]) % 16 != 0) reason = "pointer not 16-byte aligned";
  if (!reason.empty() && why) *why = reason;
  return reason.empty();
}

// Looks up or builds the plan; nullptr (and *why) when there is none.
const Plan* plan_for(const Key& key, const Shapes& sh, DType dt, std::string* why) {
  return cached_plan<Plan, Key>(
      g_mu, g_plans, key, 2,
      [&](int variant) {
        return key.kind == 0 ? build_forward(sh, dt, variant) : build_backward(sh, dt, key.kind == 1, variant);
      },
      [&](const Plan& p, int variant) {
        return fmt::format("cuDNN {} attention {} plan B={} Tq={} Tk={} NH={} G={} HS={}{}: graph variant {}, {}, "
                           "workspace {} bytes",
                           cudnn::version(),
                           key.kind == 0 ? "forward" : key.kind == 1 ? "backward (deterministic dQ)" : "backward (atomic dQ)",
                           sh.B, sh.Tq, sh.Tk, sh.H, sh.G, sh.D, sh.causal ? " causal" : "", variant,
                           p.graph->engine_note(), p.graph->workspace_bytes());
      },
      why);
}

}  // namespace

bool cudnn_attention_forward(void* out, float* lse, const void* qkv, int64_t B, int64_t T, int NH, int G,
                             int HS, DType dt, cudaStream_t stream, std::string* why) {
  const int64_t C = int64_t(NH) * HS;
  const void* ptrs[] = {out, qkv};
  if (!served(dt, HS, C, ptrs, 2, why)) return false;
  int dev = 0;
  cudaGetDevice(&dev);
  const Shapes sh = Shapes::self(B, T, NH, G, HS);
  const Plan* p = plan_for({dev, int(dt), 0, sh.signature()}, sh, dt, why);
  if (!p) return false;
  const size_t es = dtype_size(dt);
  char* base = static_cast<char*>(const_cast<void*>(qkv));
  std::vector<void*> ptr = {base, base + C * es, base + (C + int64_t(G) * HS) * es, out, lse};
  try {
    void* ws = workspace(dev, size_t(p->graph->workspace_bytes()), stream);
    p->graph->execute(cudnn::handle_for_current_device(), stream, p->uids, ptr, ws);
  } catch (const cudnn::GraphError& e) {
    fail(std::string("cuDNN attention forward: ") + e.what());
  }
  return true;
}

bool cudnn_attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out,
                              const float* lse, float* scratch, int64_t B, int64_t T, int NH, int G,
                              int HS, DType dt, CudnnDq dq, cudaStream_t stream, std::string* why) {
  const int64_t C = int64_t(NH) * HS;
  const void* ptrs[] = {dqkv, dout, qkv, out};
  if (!served(dt, HS, C, ptrs, 4, why)) return false;
  int dev = 0;
  cudaGetDevice(&dev);
  const Shapes sh = Shapes::self(B, T, NH, G, HS);
  // The deterministic algorithm keeps dS (2 bytes per score, 64-padded) in
  // cuDNN's workspace: used up to 1 GiB of it unless forced. On the H200 it
  // costs 8-16% of the backward against atomics (bench/RESULTS.md).
  const int64_t tp = (T + 63) / 64 * 64;
  bool det = dq == CudnnDq::kDeterministic ||
             (dq == CudnnDq::kAuto && B * NH * tp * tp * 2 <= (int64_t(1) << 30));
  const Plan* p = plan_for({dev, int(dt), det ? 1 : 2, sh.signature()}, sh, dt, why);
  if (!p) return false;
  const size_t es = dtype_size(dt);
  const int64_t voff = (C + int64_t(G) * HS) * es;
  char* in = static_cast<char*>(const_cast<void*>(qkv));
  char* g = static_cast<char*>(dqkv);
  std::vector<void*> ptr = {in, in + C * es, in + voff, const_cast<void*>(out), const_cast<void*>(dout),
                            const_cast<float*>(lse), g, g + C * es, g + voff, scratch};
  try {
    const size_t cws = (size_t(p->graph->workspace_bytes()) + 255) / 256 * 256;
    char* ws = static_cast<char*>(workspace(dev, cws + size_t(p->accum_bytes), stream));
    if (p->accum_bytes) {
      ptr.push_back(ws + cws);
      // cuDNN before 9.6 expects the dQ accumulator zeroed by the caller.
      if (cudnn::version() < 90600 && cudaMemsetAsync(ws + cws, 0, size_t(p->accum_bytes), stream) != cudaSuccess)
        fail("cuDNN attention backward: clearing the dQ accumulator failed");
    }
    p->graph->execute(cudnn::handle_for_current_device(), stream, p->uids, ptr, cws ? ws : nullptr);
  } catch (const cudnn::GraphError& e) {
    fail(std::string("cuDNN attention backward: ") + e.what());
  }
  return true;
}


// ---- context parallelism's block attention ----

namespace {

// A window pair's shapes: Q rows of qkv (B, Tq_buf, NH + 2G, HS) against K/V
// rows of kv (B, Tk_buf, 2G, HS); o_str/stats_str are filled by the caller.
Shapes block_shapes(int64_t B, int64_t Tq_buf, int64_t Tk_buf, int NH, int G, int HS, const BlockWindow& w) {
  const int64_t W = int64_t(NH + 2 * G) * HS, KW = int64_t(2 * G) * HS, C = int64_t(NH) * HS;
  Shapes sh{B, w.q_len, w.kv_len, NH, G, HS, w.causal, {Tq_buf * W, HS, W, 1}, {Tk_buf * KW, HS, KW, 1},
            {}, {}, {w.q_len * C, HS, C, 1}, {w.kv_len * KW, HS, KW, 1}};
  return sh;
}

}  // namespace

bool cudnn_attention_block_forward(void* out, float* lse, const void* qkv, const void* kv, int64_t B, int64_t Tq,
                                   int64_t Tk, int NH, int G, int HS, const BlockWindow& w, bool accumulate,
                                   DType dt, cudaStream_t stream, std::string* why) {
  const int64_t C = int64_t(NH) * HS, W = int64_t(NH + 2 * G) * HS, KW = int64_t(2 * G) * HS;
  const size_t es = dtype_size(dt);
  const char* q = static_cast<const char*>(qkv) + w.q_start * W * es;
  const char* k = static_cast<const char*>(kv) + w.kv_start * KW * es;
  // The first block writes the rows in place (when the stats rows are
  // 16-byte aligned); later ones land in scratch and merge by log-sum-exp.
  const bool direct = !accumulate && w.q_start % 4 == 0;
  const void* ptrs[] = {out, qkv, kv, q, k};
  if (!served(dt, HS, C, ptrs, 5, why)) return false;
  int dev = 0;
  cudaGetDevice(&dev);
  Shapes sh = block_shapes(B, Tq, Tk, NH, G, HS, w);
  sh.o_str = direct ? Dims{Tq * C, HS, C, 1} : Dims{w.q_len * C, HS, C, 1};
  sh.stats_str = direct ? Dims{NH * Tq, Tq, 1, 1} : Dims{NH * w.q_len, w.q_len, 1, 1};
  const Plan* p = plan_for({dev, int(dt), 0, sh.signature()}, sh, dt, why);
  if (!p) return false;
  const size_t cws = (size_t(p->graph->workspace_bytes()) + 255) / 256 * 256;
  const size_t o_bytes = (size_t(B * w.q_len * C) * es + 255) / 256 * 256;
  char* ws = static_cast<char*>(workspace(dev, cws + (direct ? 0 : o_bytes + size_t(B * NH * w.q_len) * 4), stream));
  char* o = direct ? static_cast<char*>(out) + w.q_start * C * es : ws + cws;
  float* st = direct ? lse + w.q_start : reinterpret_cast<float*>(ws + cws + o_bytes);
  std::vector<void*> ptr = {const_cast<char*>(q), const_cast<char*>(k), const_cast<char*>(k) + int64_t(G) * HS * es,
                            o, st};
  try {
    p->graph->execute(cudnn::handle_for_current_device(), stream, p->uids, ptr, cws ? ws : nullptr);
  } catch (const cudnn::GraphError& e) {
    fail(std::string("cuDNN block attention forward: ") + e.what());
  }
  if (!direct) attention_block_merge(out, lse, o, st, B, Tq, NH, HS, w, accumulate, dt, stream);
  return true;
}

bool cudnn_attention_block_backward(void* dqkv, void* dkv, const void* dout, const void* qkv, const void* kv,
                                    const void* out, const float* lse, float* scratch, int64_t B, int64_t Tq,
                                    int64_t Tk, int NH, int G, int HS, const BlockWindow& w, CudnnDq dq, DType dt,
                                    cudaStream_t stream, std::string* why) {
  const int64_t C = int64_t(NH) * HS, W = int64_t(NH + 2 * G) * HS, KW = int64_t(2 * G) * HS;
  const size_t es = dtype_size(dt);
  if (w.q_start % 4 != 0) {  // the stats rows must be 16-byte aligned
    if (why) *why = "query window start not a multiple of 4";
    return false;
  }
  const char* q = static_cast<const char*>(qkv) + w.q_start * W * es;
  const char* k = static_cast<const char*>(kv) + w.kv_start * KW * es;
  const char* o = static_cast<const char*>(out) + w.q_start * C * es;
  const char* d_o = static_cast<const char*>(dout) + w.q_start * C * es;
  const void* ptrs[] = {dqkv, dkv, dout, qkv, kv, out, q, k, o, d_o};
  if (!served(dt, HS, C, ptrs, 10, why)) return false;
  int dev = 0;
  cudaGetDevice(&dev);
  Shapes sh = block_shapes(B, Tq, Tk, NH, G, HS, w);
  sh.o_str = {Tq * C, HS, C, 1};
  sh.stats_str = {NH * Tq, Tq, 1, 1};
  const int64_t qp = (w.q_len + 63) / 64 * 64, kp = (w.kv_len + 63) / 64 * 64;
  const bool det = dq == CudnnDq::kDeterministic ||
                   (dq == CudnnDq::kAuto && B * NH * qp * kp * 2 <= (int64_t(1) << 30));
  const Plan* p = plan_for({dev, int(dt), det ? 1 : 2, sh.signature()}, sh, dt, why);
  if (!p) return false;
  // workspace: cuDNN's | the f32 dQ accumulator | dQ | dK, dV (compact; added into the gradients after)
  const size_t cws = (size_t(p->graph->workspace_bytes()) + 255) / 256 * 256;
  const size_t acc = (size_t(p->accum_bytes) + 255) / 256 * 256;
  const size_t dq_bytes = (size_t(B * w.q_len * C) * es + 255) / 256 * 256;
  const size_t dkv_bytes = size_t(B * w.kv_len * KW) * es;
  char* ws = static_cast<char*>(workspace(dev, cws + acc + dq_bytes + dkv_bytes, stream));
  char* dq_s = ws + cws + acc;
  char* dkv_s = dq_s + dq_bytes;
  std::vector<void*> ptr = {const_cast<char*>(q), const_cast<char*>(k), const_cast<char*>(k) + int64_t(G) * HS * es,
                            const_cast<char*>(o), const_cast<char*>(d_o), const_cast<float*>(lse) + w.q_start,
                            dq_s, dkv_s, dkv_s + int64_t(G) * HS * es, scratch};
  try {
    if (p->accum_bytes) {
      ptr.push_back(ws + cws);
      if (cudnn::version() < 90600 && cudaMemsetAsync(ws + cws, 0, size_t(p->accum_bytes), stream) != cudaSuccess)
        fail("cuDNN block attention backward: clearing the dQ accumulator failed");
    }
    p->graph->execute(cudnn::handle_for_current_device(), stream, p->uids, ptr, ws);
  } catch (const cudnn::GraphError& e) {
    fail(std::string("cuDNN block attention backward: ") + e.what());
  }
  // dqkv's Q columns of the window rows += dQ; dkv's window rows += dK, dV.
  add_rows(static_cast<char*>(dqkv) + w.q_start * W * es, dq_s, B, w.q_len, C, Tq * W, W, dt, stream);
  add_rows(static_cast<char*>(dkv) + w.kv_start * KW * es, dkv_s, B, w.kv_len, KW, Tk * KW, KW, dt, stream);
  return true;
}

#else  // !TRIPOD_HAVE_CUDNN_GRAPH

bool cudnn_attention_forward(void*, float*, const void*, int64_t, int64_t, int, int, int, DType, cudaStream_t,
                             std::string* why) {
  if (why) *why = "built without cudnn_graph.h";
  return false;
}
bool cudnn_attention_backward(void*, const void*, const void*, const void*, const float*, float*, int64_t,
                              int64_t, int, int, int, DType, CudnnDq, cudaStream_t, std::string* why) {
  if (why) *why = "built without cudnn_graph.h";
  return false;
}

bool cudnn_attention_block_forward(void*, float*, const void*, const void*, int64_t, int64_t, int64_t, int, int, int,
                                   const BlockWindow&, bool, DType, cudaStream_t, std::string* why) {
  if (why) *why = "built without cudnn_graph.h";
  return false;
}
bool cudnn_attention_block_backward(void*, void*, const void*, const void*, const void*, const void*, const float*,
                                    float*, int64_t, int64_t, int64_t, int, int, int, const BlockWindow&, CudnnDq,
                                    DType, cudaStream_t, std::string* why) {
  if (why) *why = "built without cudnn_graph.h";
  return false;
}

#endif

}  // namespace tripod::backend::cuda
