// Debug and test knobs from TRIPOD_* environment variables, read once into
// one struct (on first use) instead of in function-local statics around the
// tree. Each field names its variable; docs/debugging.md lists every
// variable tripod reads, these and the launcher's. None of them changes
// results in a normal run: they select kernels for bisecting, cap a launch
// for timings, print timings, or inject faults and delays for tests.
//
//   if (debug_config().step_timing) log_step_split(...);
#pragma once

#include <cstdint>
#include <string>

namespace tripod {

struct DebugConfig {
  // TRIPOD_CUDA_ATTENTION=auto|cudnn|cudnn-det|cudnn-atomic|wmma|scalar: the
  // CUDA attention kernels. auto (default): cuDNN's fused attention for
  // bf16/f16 where cuDNN 9 loads and has a plan, else the tensor-core (WMMA)
  // kernels where the dtype, head size and alignment allow, else CUDA cores;
  // cudnn: cuDNN or an error (-det / -atomic also force how dQ is formed);
  // wmma: tensor cores without cuDNN; scalar: the CUDA-core kernels only.
  enum class CudaAttention { kAuto, kCudnn, kCudnnDet, kCudnnAtomic, kWmma, kScalar };
  CudaAttention cuda_attention = CudaAttention::kAuto;
  // TRIPOD_CUDA_LN_BWD_BLOCKS=n: cap on the blocks of the CUDA LayerNorm
  // backward (0: the built-in cap), for before/after timings.
  int64_t cuda_ln_bwd_blocks = 0;
  // TRIPOD_STEP_TIMING=1: synchronise between the phases of an iteration
  // and log where the time goes (costs the overlap it measures).
  bool step_timing = false;
  // TRIPOD_LN_PARAMS_IN_COMPUTE_DTYPE=1: keep LayerNorm weights in the
  // compute dtype (bf16/fp16) instead of fp32, as before fp32 LayerNorm
  // params (for A/B comparisons).
  bool ln_params_in_compute_dtype = false;
  // TRIPOD_UNFUSED_ADAMW_CAST=1: the optimizer updates the fp32 masters,
  // then casts the whole bf16/fp16 compute copy in a second pass, instead of
  // writing the copy in the update's pass (the same bits; for A/B timings).
  bool unfused_adamw_cast = false;
  // TRIPOD_IPC_COLLECTIVES=auto|0|1: groups whose ranks share one memory
  // run all-reduce, all-gather, reduce-scatter, broadcast and barrier
  // through buffers they map from each other (comm/ipc/) instead of Gloo.
  // auto (default): CPU ranks on one host do; GPU ranks sharing one GPU
  // (--distributed-backend gloo) do not yet. 1: both; 0: neither. Sums over
  // more than 2 ranks round differently from Gloo's ring.
  enum class IpcCollectives { kAuto, kOff, kOn };
  IpcCollectives ipc_collectives = IpcCollectives::kAuto;
  // TRIPOD_FP8_UNFUSED_SWIGLU=1: under FP8 with delayed scaling, the MLP
  // writes SwiGLU's output (and in backward fc1's output gradient) in the
  // compute dtype and casts it in a second pass, instead of casting inside
  // the SwiGLU kernel (the same bits; for A/B timings).
  bool fp8_unfused_swiglu = false;
  // TRIPOD_CPU_MEMORY_LIMIT_MB=n: the CPU run behaves as a device of n MiB
  // (allocations past it raise OutOfMemoryError), 0: no limit.
  int64_t cpu_memory_limit_mb = 0;
  // TRIPOD_CKPT_FAIL_AT=n: the n-th checkpoint file operation fails (fault
  // injection for the checkpoint tests), 0: never.
  int64_t ckpt_fail_at = 0;
  // TRIPOD_CKPT_FAIL_ENOSPC=1: when the failing operation is a file write, it
  // fails as a full disk would (ENOSPC after half the bytes) instead.
  bool ckpt_fail_enospc = false;
  // TRIPOD_CKPT_KILL_AT=n: the process SIGKILLs itself at the n-th
  // checkpoint file operation (a write: after half of the file's bytes), as a
  // node that dies mid-save; 0: never. Counted as TRIPOD_CKPT_FAIL_AT is.
  int64_t ckpt_kill_at = 0;
  // TRIPOD_CKPT_TRACE=1: every checkpoint file operation prints its number
  // and what it is to stderr ("TRIPOD_CKPT_TRACE: 3 rename ..."), so that a
  // test can count a save's operations and aim TRIPOD_CKPT_KILL_AT.
  bool ckpt_trace = false;
  // TRIPOD_CKPT_SAVE_WINDOW=n: a checkpoint save gathers and writes at most
  // n elements of a parameter at a time (NOTE [Streamed shard save]; the
  // same bytes whatever n), 0: the default (train/checkpointing.cpp).
  int64_t ckpt_save_window = 0;
  // TRIPOD_FAULT=KIND@RANK:ITER: global rank RANK, just before training
  // iteration ITER (1-based), KIND = kill (SIGKILL itself), stop (SIGSTOP
  // itself: a hung rank), exit (exit(1) without a message), abort
  // (std::abort) or throw (an exception escaping a thread). For the fault
  // suite (tests/faults); empty: no fault.
  std::string fault_kind;
  int fault_rank = -1;
  int64_t fault_iteration = 0;
  // TRIPOD_TESTING_DATA_SLEEP_MS=n: each pipeline stage's batch load sleeps
  // n ms (tests of the time split), 0: no sleep.
  int64_t testing_data_sleep_ms = 0;
};

// The process's knobs, read from the environment on the first call. Bad
// values (not an integer, an unknown kernel name) throw tripod::Error.
const DebugConfig& debug_config();

// Reads the environment again: for tests that set a knob in-process.
void reload_debug_config();

// The knobs as the environment has them now (no caching).
DebugConfig read_debug_config();

}  // namespace tripod
