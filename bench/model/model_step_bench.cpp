// model_step_bench: what the model's per-call bookkeeping costs on the CPU.
//   1. one parameter looked up by name (format the name, hash it, find it):
//      what every layer forward/backward did ~24 times before the typed
//      LayerParams (model/layer_params.h) were resolved at construction;
//   2. one training micro-batch (forward with grad + backward) of a tiny
//      24-layer model, where bookkeeping is a visible share of the time.
// Prints a checksum of the losses and gradients: it must not change when
// the model code is refactored (same numbers, bit for bit).
//
//   OMP_NUM_THREADS=1 build/bench/model/model_step_bench [iterations, default 200]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "model/gpt_model.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

uint64_t fnv1a(const void* p, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tripod;
  const int iters = argc > 1 ? std::atoi(argv[1]) : 200;
  // Small enough that per-call bookkeeping, not arithmetic, is what is timed.
  constexpr int64_t kB = 1, kT = 8, kL = 24, kC = 16, kNH = 2, kV = 64;
  auto be = backend::make_cpu_backend();
  config::GptConfig cfg;
  cfg.num_layers = kL;
  cfg.hidden_size = kC;
  cfg.num_attention_heads = kNH;
  cfg.seq_length = kT;
  cfg.vocab_size = kV;
  model::StageConfig st;
  model::GptModel m(cfg, st, *be);
  m.params().init(1234, 0.02f, kL);

  // 1. Lookup by name, as layer_param(l, suffix) did.
  static const char* kSuffixes[] = {"input_layernorm.weight", "self_attention.linear_qkv.weight",
                                    "self_attention.linear_proj.bias", "mlp.linear_fc1.weight",
                                    "mlp.linear_fc2.bias", "pre_mlp_layernorm.bias"};
  const int lookups = 200000;
  uintptr_t sink = 0;
  auto t0 = Clock::now();
  for (int i = 0; i < lookups; ++i) {
    const int64_t l = i % kL;
    sink += reinterpret_cast<uintptr_t>(
        &m.params().get(fmt::format("decoder.layers.{}.{}", l, kSuffixes[i % 6])));
  }
  const double lookup_ns = ms_since(t0) * 1e6 / lookups;

  // 2. One micro-batch, forward with grad + backward.
  model::MicroBatchActs a = m.make_acts(kB, kT);
  for (int64_t i = 0; i < kB * kT; ++i) {
    a.tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 37 + 5) % kV);
    a.targets.data<int32_t>()[i] = static_cast<int32_t>((i * 11 + 3) % kV);
  }
  std::vector<double> times;
  uint64_t sum = 0;
  for (int it = 0; it < iters + 3; ++it) {
    m.params().zero_grad();
    const auto s0 = Clock::now();
    m.forward(a, true, 1.f / (kB * kT), 777);
    m.backward(a, nullptr, 777);
    if (it >= 3) times.push_back(ms_since(s0));
    if (it == 0) {
      sum = fnv1a(a.losses.raw(), a.losses.nbytes());
      sum = fnv1a(m.params().grads().raw(), m.params().grads().nbytes(), sum);
    }
  }
  std::sort(times.begin(), times.end());
  std::printf("model_step_bench: %lld layers, hidden %lld, B %lld, T %lld (%zu parameters)\n",
              static_cast<long long>(kL), static_cast<long long>(kC), static_cast<long long>(kB),
              static_cast<long long>(kT), static_cast<size_t>(m.params().numel()));
  std::printf("  lookup by name     %8.1f ns per parameter (format + hash + find)\n", lookup_ns);
  std::printf("  fwd+bwd micro-batch %7.3f ms median, %.3f ms min over %d iterations\n",
              times[times.size() / 2], times.front(), iters);
  std::printf("  checksum           %016llx (losses and gradients, bit for bit)\n",
              static_cast<unsigned long long>(sum));
  return sink == 1 ? 1 : 0;
}
