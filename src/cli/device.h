// Backend selection for subcommands: "cpu" or "cuda" (when built with CUDA),
// and which GPU each rank of a job uses.
//
// GPU assignment: rank r of a node uses GPU local_rank. With more ranks on a
// node than GPUs, NCCL (the GPU default) is an error; with
// --distributed-backend gloo ranks share GPUs (local_rank % device count),
// each rank's caching allocator is capped at its share of the GPU, and the
// start-up log says so: a layout rehearsal, right for correctness and memory
// per rank, meaningless for speed (docs/parallelism.md).
#pragma once

#include <memory>
#include <string>

#include "backend/ops.h"
#include "comm/context.h"
#include "comm/rendezvous.h"

namespace tripod::cli {

std::unique_ptr<backend::Backend> make_backend(const std::string& device, int local_rank = 0);

// The backend for this rank of a job: the GPU from assign_gpu, the memory cap
// when ranks share it, and the start-up log line about sharing.
std::unique_ptr<backend::Backend> make_backend(const std::string& device, const comm::RankInfo& info,
                                               comm::CommBackend backend);

struct GpuAssignment {
  int device = 0;   // the GPU this rank uses
  int sharing = 1;  // local ranks on that GPU (1: it has the GPU to itself)
};
// Pure logic (tests): throws, naming the rehearsal mode, when NCCL would need
// more GPUs than are visible.
GpuAssignment assign_gpu(int local_rank, int local_world_size, int device_count, comm::CommBackend backend);

// `--distributed-backend` value -> CommBackend ("" -> Default); checks it
// against the device (NCCL needs --device cuda). With cpu_nccl_as_gloo (tripod
// train: a GPU job script rehearsed on CPU), nccl on a CPU run is Gloo
// instead of an error; the caller logs that once.
comm::CommBackend comm_backend_for(const std::string& device, const std::string& flag,
                                   bool cpu_nccl_as_gloo = false);

}  // namespace tripod::cli
