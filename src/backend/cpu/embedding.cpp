// CPU reference: vocab-parallel token embedding + learned positions.
// CUDA version: backend/cuda/embedding.cu. Megatron: VocabParallelEmbedding.
#include <cstring>

#include "backend/cpu/kernels.h"

namespace tripod::backend::cpu {

// out (B,T,C), tokens (B,T), wte (V_tp,C), wpe (T,C) or null
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                       int64_t Tn, int64_t C, int64_t vocab_start, int64_t V_tp) {
#pragma omp parallel for
  for (int64_t bt = 0; bt < B * Tn; ++bt) {
    T* o = out + bt * C;
    const int64_t id = static_cast<int64_t>(tokens[bt]) - vocab_start;
    const bool local = id >= 0 && id < V_tp;  // rows of other tp ranks are zero here
    const T* w = local ? wte + id * C : nullptr;
    const T* p = wpe ? wpe + (bt % Tn) * C : nullptr;
    for (int64_t c = 0; c < C; ++c) o[c] = (local ? w[c] : T(0)) + (p ? p[c] : T(0));
  }
}

// dwte (V_tp,C) +=, dwpe (T,C) +=, dout (B,T,C)
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B,
                        int64_t Tn, int64_t C, int64_t vocab_start, int64_t V_tp) {
  for (int64_t bt = 0; bt < B * Tn; ++bt) {  // serial: rows may repeat
    const T* d = dout + bt * C;
    const int64_t id = static_cast<int64_t>(tokens[bt]) - vocab_start;
    if (dwte && id >= 0 && id < V_tp)
      for (int64_t c = 0; c < C; ++c) dwte[id * C + c] += d[c];
    if (dwpe)
      for (int64_t c = 0; c < C; ++c) dwpe[(bt % Tn) * C + c] += d[c];
  }
}

template void embedding_forward<float>(float*, const int32_t*, const float*, const float*, int64_t,
                                       int64_t, int64_t, int64_t, int64_t);
template void embedding_forward<double>(double*, const int32_t*, const double*, const double*,
                                        int64_t, int64_t, int64_t, int64_t, int64_t);
template void embedding_backward<float>(float*, float*, const float*, const int32_t*, int64_t,
                                        int64_t, int64_t, int64_t, int64_t);
template void embedding_backward<double>(double*, double*, const double*, const int32_t*, int64_t,
                                         int64_t, int64_t, int64_t, int64_t);

}  // namespace tripod::backend::cpu
