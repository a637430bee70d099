// Implementation of base/debug_config.h.
#include "base/debug_config.h"

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/error.h"

namespace tripod {
namespace {

// Published once read; hot paths (the host allocator) read it without a
// lock. A reload publishes a new copy and keeps the old one alive (tests only).
std::mutex g_mutex;
std::atomic<const DebugConfig*> g_config{nullptr};

int64_t non_negative(const char* name) {
  const int64_t v = env::get_int_or(name, 0);
  TRIPOD_CHECK_HINT(v >= 0, fmt::format("set {} to 0 or more, or unset it", name), "{}={} is negative", name, v);
  return v;
}

}  // namespace

DebugConfig read_debug_config() {
  DebugConfig c;
  const std::string attn = env::get_or("TRIPOD_CUDA_ATTENTION", "auto");
  using A = DebugConfig::CudaAttention;
  if (attn == "auto" || attn.empty()) c.cuda_attention = A::kAuto;
  else if (attn == "cudnn") c.cuda_attention = A::kCudnn;
  else if (attn == "cudnn-det") c.cuda_attention = A::kCudnnDet;
  else if (attn == "cudnn-atomic") c.cuda_attention = A::kCudnnAtomic;
  else if (attn == "wmma") c.cuda_attention = A::kWmma;
  else if (attn == "scalar") c.cuda_attention = A::kScalar;
  else
    TRIPOD_CHECK_HINT(false,
                      "set TRIPOD_CUDA_ATTENTION to auto, cudnn, cudnn-det, cudnn-atomic, wmma or "
                      "scalar, or unset it",
                      "TRIPOD_CUDA_ATTENTION='{}' is not a kernel choice", attn);
  c.cuda_ln_bwd_blocks = non_negative("TRIPOD_CUDA_LN_BWD_BLOCKS");
  c.step_timing = env::get_int_or("TRIPOD_STEP_TIMING", 0) != 0;
  const std::string ipc = env::get_or("TRIPOD_IPC_COLLECTIVES", "auto");
  using I = DebugConfig::IpcCollectives;
  if (ipc == "auto" || ipc.empty()) c.ipc_collectives = I::kAuto;
  else if (ipc == "0") c.ipc_collectives = I::kOff;
  else if (ipc == "1") c.ipc_collectives = I::kOn;
  else
    TRIPOD_CHECK_HINT(false, "set TRIPOD_IPC_COLLECTIVES to auto, 0 or 1",
                      "TRIPOD_IPC_COLLECTIVES='{}' is not auto, 0 or 1", ipc);
  c.ln_params_in_compute_dtype = env::get_int_or("TRIPOD_LN_PARAMS_IN_COMPUTE_DTYPE", 0) != 0;
  c.unfused_adamw_cast = env::get_int_or("TRIPOD_UNFUSED_ADAMW_CAST", 0) != 0;
  c.fp8_unfused_swiglu = env::get_int_or("TRIPOD_FP8_UNFUSED_SWIGLU", 0) != 0;
  c.cpu_memory_limit_mb = non_negative("TRIPOD_CPU_MEMORY_LIMIT_MB");
  c.ckpt_fail_at = non_negative("TRIPOD_CKPT_FAIL_AT");
  c.ckpt_fail_enospc = env::get_int_or("TRIPOD_CKPT_FAIL_ENOSPC", 0) != 0;
  c.testing_data_sleep_ms = non_negative("TRIPOD_TESTING_DATA_SLEEP_MS");
  c.ckpt_kill_at = non_negative("TRIPOD_CKPT_KILL_AT");
  c.ckpt_trace = env::get_int_or("TRIPOD_CKPT_TRACE", 0) != 0;
  c.ckpt_save_window = non_negative("TRIPOD_CKPT_SAVE_WINDOW");
  if (const std::string f = env::get_or("TRIPOD_FAULT", ""); !f.empty()) {
    const auto at = f.find('@'), colon = f.find(':');
    const std::string kind = f.substr(0, at);
    const bool known = kind == "kill" || kind == "stop" || kind == "exit" || kind == "abort" || kind == "throw";
    int rank = -1;
    long long it = 0;
    const bool parsed = at != std::string::npos && colon != std::string::npos && colon > at &&
                        std::sscanf(f.c_str() + at + 1, "%d:%lld", &rank, &it) == 2 && rank >= 0 && it >= 1;
    TRIPOD_CHECK_HINT(known && parsed, "e.g. TRIPOD_FAULT=kill@2:5 (kill, stop, exit, abort or throw)",
                      "TRIPOD_FAULT='{}' is not KIND@RANK:ITERATION", f);
    c.fault_kind = kind;
    c.fault_rank = rank;
    c.fault_iteration = it;
  }
  return c;
}

const DebugConfig& debug_config() {
  if (const DebugConfig* c = g_config.load(std::memory_order_acquire)) return *c;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_config.load(std::memory_order_relaxed)) g_config.store(new DebugConfig(read_debug_config()));
  return *g_config.load(std::memory_order_acquire);
}

void reload_debug_config() {
  auto* c = new DebugConfig(read_debug_config());
  std::lock_guard<std::mutex> lock(g_mutex);
  // The previous config stays alive (a reader may still hold a reference to
  // it) and reachable, so that LeakSanitizer does not report it.
  static std::vector<std::unique_ptr<const DebugConfig>> retired;
  if (const DebugConfig* old = g_config.load(std::memory_order_relaxed)) retired.emplace_back(old);
  g_config.store(c, std::memory_order_release);
}

}  // namespace tripod
