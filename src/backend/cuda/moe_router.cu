// The MoE router's kernels: the top-k with its score function and its
// backward, and the auxiliary losses (CUDA version of backend/cpu's moe.cpp;
// contracts in backend/ops.h, MoeRouting and MoeAuxLoss). One thread per
// token does the score function, the top-k and the softmax in one pass over
// the token's E logits, in double as the reference does, so the choice and
// its ties (the lower expert index wins) are the reference's. The losses
// reduce over tokens with fixed-order block trees in double (no atomics):
// the same bits on every run.
#include "backend/cuda/common.cuh"
#include "backend/cuda/moe.cuh"

namespace tripod::backend::cuda {

namespace {

constexpr int kBlock = 128;

__device__ __forceinline__ double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

// The score the top-k compares for expert e: the logit (softmax after the
// top-k), softmax(l)[e] (pre-softmax; mx, sum of its exponentials given),
// or sigmoid(l[e]) + bias[e].
struct Score {
  const float* l;
  const float* bias;
  bool use_sigmoid, pre_softmax;
  double mx, sum;
  __device__ double operator()(int64_t e) const {
    if (use_sigmoid) return sigmoid_d(l[e]) + (bias ? static_cast<double>(bias[e]) : 0.0);
    if (pre_softmax) return exp(static_cast<double>(l[e]) - mx) / sum;
    return l[e];
  }
};

// idx[0..k) = the k largest v(e) in descending order; ties: the lower index.
// A chosen expert is skipped by scanning the ones chosen before it.
template <typename V>
__device__ void top_k(const V& v, int64_t E, int k, int32_t* idx) {
  for (int j = 0; j < k; ++j) {
    int64_t best = -1;
    double vb = 0;
    for (int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken |= idx[i] == e;
      if (taken) continue;
      const double x = v(e);
      if (best < 0 || x > vb) best = e, vb = x;
    }
    idx[j] = static_cast<int32_t>(best);
  }
}

// mx and sum of exp(l - mx) over l[0..E).
__device__ void softmax_stats(const float* l, int64_t E, double& mx, double& sum) {
  mx = l[0];
  for (int64_t e = 1; e < E; ++e) mx = fmax(mx, static_cast<double>(l[e]));
  sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += exp(static_cast<double>(l[e]) - mx);
}

__global__ void router_topk_kernel(float* probs, int32_t* indices, const float* logits, const float* bias, int64_t N,
                                   int64_t E, int k, bool use_sigmoid, bool pre_softmax, float scaling) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  const float* l = logits + n * E;
  int32_t* idx = indices + n * k;
  float* p = probs + n * k;
  Score score{l, bias, use_sigmoid, pre_softmax, 0.0, 1.0};
  if (!use_sigmoid && pre_softmax) softmax_stats(l, E, score.mx, score.sum);
  top_k(score, E, k, idx);
  const double s = scaling != 0.f ? static_cast<double>(scaling) : 1.0;
  if (use_sigmoid) {
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += sigmoid_d(l[idx[j]]);
    for (int j = 0; j < k; ++j) {
      const double g = sigmoid_d(l[idx[j]]);
      p[j] = static_cast<float>((k > 1 ? g / (sum + 1e-20) : g) * s);
    }
  } else if (pre_softmax) {
    for (int j = 0; j < k; ++j) p[j] = static_cast<float>(score(idx[j]) * s);
  } else {  // softmax over the chosen logits; the first is their maximum
    const double mx = l[idx[0]];
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += exp(static_cast<double>(l[idx[j]]) - mx);
    for (int j = 0; j < k; ++j) p[j] = static_cast<float>(exp(static_cast<double>(l[idx[j]]) - mx) / sum * s);
  }
}

__global__ void router_topk_backward_kernel(float* dlogits, const float* dprobs, const float* logits,
                                            const int32_t* indices, int64_t N, int64_t E, int k, bool use_sigmoid,
                                            bool pre_softmax, float scaling) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  const float* l = logits + n * E;
  const int32_t* idx = indices + n * k;
  const float* dp = dprobs + n * k;
  float* d = dlogits + n * E;
  const double s = scaling != 0.f ? static_cast<double>(scaling) : 1.0;
  if (!use_sigmoid && pre_softmax) {  // p_j = s softmax(l)[idx_j]
    double mx, sum;
    softmax_stats(l, E, mx, sum);
    auto ds = [&](int64_t e) {  // sum of s dp_j over the choices of e, in choice order
      double v = 0;
      for (int j = 0; j < k; ++j)
        if (idx[j] == e) v += s * dp[j];
      return v;
    };
    double dot = 0;
    for (int64_t e = 0; e < E; ++e) dot += exp(static_cast<double>(l[e]) - mx) / sum * ds(e);
    for (int64_t e = 0; e < E; ++e) {
      const double sm = exp(static_cast<double>(l[e]) - mx) / sum;
      d[e] = static_cast<float>(sm * (ds(e) - dot));
    }
    return;
  }
  for (int64_t e = 0; e < E; ++e) d[e] = 0.f;
  if (!use_sigmoid) {  // p_j = s softmax_j(l[idx])
    double mx = l[idx[0]], sum = 0, dot = 0;
    for (int j = 0; j < k; ++j) mx = fmax(mx, static_cast<double>(l[idx[j]]));
    for (int j = 0; j < k; ++j) sum += exp(static_cast<double>(l[idx[j]]) - mx);
    for (int j = 0; j < k; ++j) dot += exp(static_cast<double>(l[idx[j]]) - mx) / sum * s * dp[j];
    for (int j = 0; j < k; ++j) {
      const double q = exp(static_cast<double>(l[idx[j]]) - mx) / sum;
      d[idx[j]] = static_cast<float>(q * (s * dp[j] - dot));
    }
  } else {  // p_j = s g_j / (sum g + 1e-20) (k > 1), or s g_j; g = sigmoid(l[idx])
    double sum = 0, dot = 0;
    for (int j = 0; j < k; ++j) sum += sigmoid_d(l[idx[j]]);
    const double S = sum + 1e-20;
    for (int j = 0; j < k; ++j) dot += s * dp[j] * sigmoid_d(l[idx[j]]);
    for (int j = 0; j < k; ++j) {
      const double g = sigmoid_d(l[idx[j]]);
      const double dg = k > 1 ? s * dp[j] / S - dot / (S * S) : s * dp[j];
      d[idx[j]] = static_cast<float>(dg * g * (1.0 - g));
    }
  }
}

// ---- auxiliary losses ----
// Scratch (doubles): sa (N, E) the scores the loss uses, lse (N), count and
// psum (G, E), then the per-token top-k (N k i32, packed two per double).
struct AuxScratch {
  double *sa, *lse, *count, *psum;
  int32_t* topk;
  AuxScratch(double* p, int64_t N, int64_t E, int64_t G)
      : sa(p), lse(p + N * E), count(p + N * E + N), psum(p + N * E + N + G * E),
        topk(reinterpret_cast<int32_t*>(p + N * E + N + 2 * G * E)) {}
};

// Per token: lse, the scores (softmax, or sigmoid normalised to sum 1) and their top-k.
__global__ void aux_scores_kernel(AuxScratch w, const float* logits, int64_t N, int64_t E, int k, bool use_sigmoid) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  const float* l = logits + n * E;
  double* a = w.sa + n * E;
  double mx, sum;
  softmax_stats(l, E, mx, sum);
  w.lse[n] = mx + log(sum);
  if (use_sigmoid) {
    double ssum = 0;
    for (int64_t e = 0; e < E; ++e) ssum += (a[e] = sigmoid_d(l[e]));
    for (int64_t e = 0; e < E; ++e) a[e] /= ssum + 1e-20;
  } else {
    for (int64_t e = 0; e < E; ++e) a[e] = exp(static_cast<double>(l[e]) - mx) / sum;
  }
  top_k([a](int64_t e) { return a[e]; }, E, k, w.topk + n * k);
}

constexpr int kReduce = 256;  // threads of the reduction blocks (a power of two)

// Sum of v over the block in a fixed tree; thread 0 gets the result.
__device__ double block_sum_d(double v, double* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();
  return r;
}

// One block per (group g, expert e): count[g, e] = choices of e in g, psum[g, e] = sum of sa[., e] over g.
__global__ void aux_group_kernel(AuxScratch w, int64_t E, int k, int64_t Ng) {
  __shared__ double sh[kReduce];
  const int64_t g = blockIdx.x / E, e = blockIdx.x % E;
  double cnt = 0, ps = 0;
  for (int64_t n = g * Ng + threadIdx.x; n < (g + 1) * Ng; n += blockDim.x) {
    for (int j = 0; j < k; ++j) cnt += w.topk[n * k + j] == e ? 1.0 : 0.0;
    ps += w.sa[n * E + e];
  }
  cnt = block_sum_d(cnt, sh);
  ps = block_sum_d(ps, sh);
  if (threadIdx.x == 0) w.count[blockIdx.x] = cnt, w.psum[blockIdx.x] = ps;
}

// One block: losses = [c sum count psum, z_coeff mean lse^2].
__global__ void aux_total_kernel(float* losses, AuxScratch w, int64_t N, int64_t GE, double c, double z_coeff) {
  __shared__ double sh[kReduce];
  double aux = 0, z = 0;
  for (int64_t i = threadIdx.x; i < GE; i += blockDim.x) aux += c * w.count[i] * w.psum[i];
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) z += w.lse[n] * w.lse[n];
  aux = block_sum_d(aux, sh);
  z = block_sum_d(z, sh);
  if (threadIdx.x == 0) {
    losses[0] = static_cast<float>(aux);
    losses[1] = static_cast<float>(z * z_coeff / static_cast<double>(N));
  }
}

// Per token: dlogits += grad_scale d(aux + z)/d logits.
__global__ void aux_backward_kernel(float* dlogits, AuxScratch w, const float* logits, int64_t N, int64_t E,
                                    bool use_sigmoid, int64_t Ng, double c, float aux_coeff, float z_coeff,
                                    float grad_scale) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  const float* l = logits + n * E;
  const double* a = w.sa + n * E;
  const double* cnt = w.count + (n / Ng) * E;  // d aux / d sa[n, e] = c count_g[e]
  double mx, sum;
  softmax_stats(l, E, mx, sum);
  double S = 0, dot = 0;
  if (aux_coeff != 0.f) {
    if (use_sigmoid) {
      for (int64_t e = 0; e < E; ++e) S += sigmoid_d(l[e]);
      S += 1e-20;
      for (int64_t e = 0; e < E; ++e) dot += c * cnt[e] * sigmoid_d(l[e]);
    } else {
      for (int64_t e = 0; e < E; ++e) dot += a[e] * c * cnt[e];
    }
  }
  for (int64_t e = 0; e < E; ++e) {
    double d = 0;
    if (aux_coeff != 0.f) {
      if (use_sigmoid) {
        const double g = sigmoid_d(l[e]);
        d = (c * cnt[e] / S - dot / (S * S)) * g * (1.0 - g);
      } else {
        d = a[e] * (c * cnt[e] - dot);
      }
    }
    const double sm = exp(static_cast<double>(l[e]) - mx) / sum;
    d += static_cast<double>(z_coeff) * 2.0 * w.lse[n] * sm / static_cast<double>(N);
    dlogits[n * E + e] = static_cast<float>(dlogits[n * E + e] + grad_scale * d);
  }
}

unsigned blocks(int64_t n, int block) { return static_cast<unsigned>(ceil_div(n, block)); }

}  // namespace

void moe_router_topk(float* probs, int32_t* indices, const float* logits, const float* bias, int64_t N, int64_t E,
                     int k, bool use_sigmoid, bool pre_softmax, float scaling, cudaStream_t stream) {
  if (N == 0) return;
  router_topk_kernel<<<blocks(N, kBlock), kBlock, 0, stream>>>(probs, indices, logits, bias, N, E, k, use_sigmoid,
                                                               pre_softmax, scaling);
  TRIPOD_LAUNCH_CHECK();
}

void moe_router_topk_backward(float* dlogits, const float* dprobs, const float* logits, const int32_t* indices,
                              int64_t N, int64_t E, int k, bool use_sigmoid, bool pre_softmax, float scaling,
                              cudaStream_t stream) {
  if (N == 0) return;
  router_topk_backward_kernel<<<blocks(N, kBlock), kBlock, 0, stream>>>(dlogits, dprobs, logits, indices, N, E, k,
                                                                        use_sigmoid, pre_softmax, scaling);
  TRIPOD_LAUNCH_CHECK();
}

int64_t moe_aux_loss_scratch(int64_t N, int64_t E, int k, int64_t seq_length) {
  const int64_t G = seq_length > 0 ? N / seq_length : 1;
  return N * E + N + 2 * G * E + ceil_div(N * k, 2);
}

void moe_aux_loss(float* dlogits, float* losses, const float* logits, int64_t N, int64_t E, int k,
                  bool use_sigmoid, int64_t seq_length, float aux_coeff, float z_coeff, float grad_scale,
                  double* scratch, cudaStream_t stream) {
  const int64_t Ng = seq_length > 0 ? seq_length : N, G = Ng > 0 ? N / Ng : 0;
  if (N == 0) {
    TRIPOD_CUDA_CHECK(cudaMemsetAsync(losses, 0, 2 * sizeof(float), stream));
    return;
  }
  const AuxScratch w(scratch, N, E, G);
  const double c = static_cast<double>(E) * aux_coeff / (static_cast<double>(k) * Ng * Ng) / G;
  aux_scores_kernel<<<blocks(N, kBlock), kBlock, 0, stream>>>(w, logits, N, E, k, use_sigmoid);
  TRIPOD_LAUNCH_CHECK();
  aux_group_kernel<<<static_cast<unsigned>(G * E), kReduce, 0, stream>>>(w, E, k, Ng);
  TRIPOD_LAUNCH_CHECK();
  aux_total_kernel<<<1, kReduce, 0, stream>>>(losses, w, N, G * E, c, z_coeff);
  TRIPOD_LAUNCH_CHECK();
  if (!dlogits) return;
  aux_backward_kernel<<<blocks(N, kBlock), kBlock, 0, stream>>>(dlogits, w, logits, N, E, use_sigmoid, Ng, c,
                                                                aux_coeff, z_coeff, grad_scale);
  TRIPOD_LAUNCH_CHECK();
}

}  // namespace tripod::backend::cuda
