// Environment checks behind `tripod doctor` (mission step 1 and the field
// guide's troubleshooting table). Each check is a small function of its
// inputs (environment map, file text, numbers) returning {status, finding,
// fix}, so tests inject fake inputs; gather_*() read the real machine.
//
// Relates to: cli/doctor.cpp (flags, output), comm/rendezvous.h (launcher
// variables), plan/ (TP inside a node), docs/doctor.md (every check, why).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tripod::doctor {

enum class Status { kPass, kInfo, kWarn, kFail };
const char* to_string(Status s);  // "pass" | "info" | "warn" | "fail"

struct CheckResult {
  std::string name;     // "host-ram", "shm", "nccl-socket-ifname", ...
  Status status = Status::kPass;
  std::string finding;  // what was found, with the numbers
  std::string fix;      // what to do (empty when nothing)
};

using EnvMap = std::map<std::string, std::string>;

// ---- host ----

// /proc/meminfo text -> MemTotal / MemAvailable in bytes (nullopt when absent).
std::optional<int64_t> meminfo_bytes(const std::string& meminfo, const std::string& key);
// Host RAM >= 2 x model size (model size = params x 4 bytes: fp32 weights as
// checkpoints hold them); fail below that in total, warn below that available.
// model_params 0: unknown, only report.
CheckResult check_host_ram(const std::string& meminfo, int64_t model_params);
// /dev/shm >= 32 GiB inside containers (data loader and NCCL's shared
// memory transport); outside containers only reported.
CheckResult check_shm(std::optional<int64_t> shm_bytes, bool in_container);
// Container detection from /proc/1/cgroup text and marker files.
bool detect_container(const std::string& proc1_cgroup, bool dockerenv_exists, bool containerenv_exists,
                      const EnvMap& env);
// Free space of the checkpoint directory and its file system type (statfs
// f_type). NFS (0x6969) and SMB/CIFS warn: slow, non-atomic renames under
// load. need_bytes 0: warn only below 10 GiB.
CheckResult check_save_dir(const std::string& path, int64_t free_bytes, int64_t fs_magic, int64_t need_bytes);
std::string fs_name(int64_t fs_magic);  // "nfs", "ext4/ext3", "xfs", "tmpfs", ... or hex

// ---- launch environment ----

// NCCL_SOCKET_IFNAME names interfaces that exist. NCCL's syntax: a comma
// list of prefixes ("eth" matches eth0), "=name" for an exact name, a
// leading "^" for an exclude list.
CheckResult check_socket_ifname(const EnvMap& env, const std::vector<std::string>& interfaces);
// NCCL_IB_DISABLE=1 while InfiniBand devices exist (warn), or IB enabled
// with no IB device (info).
CheckResult check_ib_disable(const EnvMap& env, bool ib_devices_present);
// NCCL_DEBUG=INFO/TRACE left on: warn (log volume costs throughput).
CheckResult check_nccl_debug(const EnvMap& env);
// Nodes in the job from NNODES, SLURM_NNODES, SLURM_JOB_NUM_NODES, PET_NNODES,
// or WORLD_SIZE / LOCAL_WORLD_SIZE; 1 when none says otherwise.
int job_nnodes(const EnvMap& env);
bool is_loopback_address(const std::string& addr);
// MASTER_ADDR=localhost / 127.x / ::1 with more than one node: fail.
CheckResult check_master_addr(const EnvMap& env);
// TCP connect to MASTER_ADDR:MASTER_PORT within timeout_ms. Refused means
// the host answers but nothing listens yet (fine before launch).
CheckResult check_master_reachable(const EnvMap& env, int timeout_ms);
// Names of this machine's network interfaces (getifaddrs).
std::vector<std::string> list_interfaces();

// ---- GPUs ----

struct GpuInfo {
  std::string name;
  int64_t memory_bytes = 0;
  int major = 0, minor = 0;  // compute capability
};
struct CudaInventory {
  bool built_with_cuda = false;
  int driver_version = 0;   // cudaDriverGetVersion: 12040 = 12.4 (0: no driver)
  int runtime_version = 0;  // cudaRuntimeGetVersion
  std::string error;        // why no devices could be listed
  std::vector<GpuInfo> gpus;
  int nccl_version = 0;     // ncclGetVersion (0: not built with NCCL)
  // The libcudnn.so.9 the CUDA backend would open (dlopen by that name, as
  // the backend does): cudnnGetVersion (91900 = 9.19.0; 0: none found) and
  // the folder it came from.
  int cudnn_version = 0;
  std::string cudnn_dir;
};
// Reads the CUDA runtime (CUDA builds); CPU builds report built_with_cuda false.
CudaInventory gather_cuda_inventory();
std::string cuda_version_str(int v);  // 12040 -> "12.4"
std::string nccl_version_str(int v);  // 22105 -> "2.21.5"
// GPU count, names, memory; no GPU -> info "no GPU: CPU backend only".
CheckResult check_gpus(const CudaInventory& inv);
// The driver must support the runtime tripod was built with (driver >= runtime).
CheckResult check_cuda_versions(const CudaInventory& inv);
CheckResult check_nccl_version(const CudaInventory& inv);
std::string cudnn_version_str(int v);  // 91900 -> "9.19.0"
// cuDNN 9 serves the flash attention (else tripod's own kernels) and, from
// 9.19, --fp8-dot-product-attention: which of them this machine gets.
CheckResult check_cudnn_version(const CudaInventory& inv);

// `nvidia-smi topo -m`: link type between every pair of GPUs.
struct Topology {
  int num_gpus = 0;
  std::vector<std::vector<std::string>> link;  // [i][j]: "X", "NV12", "PIX", "PHB", "SYS", ...
};
std::optional<Topology> parse_topology(const std::string& topo_text);
bool is_nvlink(const std::string& link);  // "NV1".."NV18"
// All pairs NVLink: pass. PCIe pairs: warn, naming them and, with tp > 0,
// whether a TP group [k tp, (k+1) tp) would cross PCIe (or the node).
CheckResult check_topology(const std::optional<std::string>& topo_text, int tp);

// ---- running them ----

struct DoctorOptions {
  int64_t model_params = 0;  // --model-params
  std::string save_dir = ".";
  int tp = 0;                // --tensor-model-parallel-size (0: unknown)
  int connect_timeout_ms = 2000;
};
// Every check that needs no communicator, on this machine.
std::vector<CheckResult> run_local_checks(const DoctorOptions& o);

}  // namespace tripod::doctor
