// Host checks: RAM, /dev/shm, checkpoint directory (free space, NFS).
// See doctor/checks.h for the contract, docs/doctor.md for the thresholds.
#include <sstream>

#include <fmt/format.h>

#include "doctor/checks.h"

namespace tripod::doctor {
namespace {

constexpr double kGiB = double(1ll << 30);

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / kGiB); }

}  // namespace

const char* to_string(Status s) {
  switch (s) {
    case Status::kPass: return "pass";
    case Status::kInfo: return "info";
    case Status::kWarn: return "warn";
    case Status::kFail: return "fail";
  }
  return "?";
}

std::optional<int64_t> meminfo_bytes(const std::string& meminfo, const std::string& key) {
  std::istringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(key.size() + 1));
    int64_t value = 0;
    std::string unit;
    if (!(fields >> value)) return std::nullopt;
    fields >> unit;
    return unit == "kB" ? value * 1024 : value;
  }
  return std::nullopt;
}

CheckResult check_host_ram(const std::string& meminfo, int64_t model_params) {
  CheckResult r{"host-ram", Status::kPass, "", ""};
  const auto total = meminfo_bytes(meminfo, "MemTotal");
  const auto avail = meminfo_bytes(meminfo, "MemAvailable");
  if (!total) {
    r.status = Status::kWarn;
    r.finding = "could not read MemTotal from /proc/meminfo";
    return r;
  }
  const double have = double(*total), free = double(avail.value_or(*total));
  r.finding = fmt::format("{} total, {} available", gib(have), gib(free));
  if (model_params <= 0) {
    r.fix = "pass --model-params N to check against 2x the model size";
    return r;
  }
  const double need = 2.0 * 4.0 * double(model_params);  // 2 x fp32 weights
  r.finding += fmt::format("; 2x model size ({} params x 4 B) = {}", model_params, gib(need));
  if (have < need) {
    r.status = Status::kFail;
    r.fix = "use a host with more RAM, or load with fewer ranks per node (checkpoint loading and data "
            "loading hold host copies)";
  } else if (free < need) {
    r.status = Status::kWarn;
    r.fix = "free host memory (other processes hold it) before loading the model";
  }
  return r;
}

CheckResult check_shm(std::optional<int64_t> shm_bytes, bool in_container) {
  CheckResult r{"shm", Status::kPass, "", ""};
  if (!shm_bytes) {
    r.status = in_container ? Status::kWarn : Status::kInfo;
    r.finding = "/dev/shm is not mounted";
    r.fix = in_container ? "start the container with --shm-size=64g (or --ipc=host)" : "";
    return r;
  }
  r.finding = fmt::format("/dev/shm {}{}", gib(double(*shm_bytes)), in_container ? " (in a container)" : "");
  if (in_container && double(*shm_bytes) < 32.0 * kGiB) {
    r.status = Status::kWarn;
    r.fix = "start the container with --shm-size=64g (or --ipc=host); Docker's default is 64 MB and NCCL's "
            "shared-memory transport and data loaders run out of it";
  }
  return r;
}

bool detect_container(const std::string& proc1_cgroup, bool dockerenv_exists, bool containerenv_exists,
                      const EnvMap& env) {
  if (dockerenv_exists || containerenv_exists || env.count("container") || env.count("KUBERNETES_SERVICE_HOST"))
    return true;
  for (const char* marker : {"docker", "kubepods", "containerd", "lxc", "libpod"})
    if (proc1_cgroup.find(marker) != std::string::npos) return true;
  return false;
}

std::string fs_name(int64_t magic) {
  switch (uint32_t(magic)) {
    case 0x6969: return "nfs";
    case 0xEF53: return "ext4/ext3";
    case 0x58465342: return "xfs";
    case 0x01021994: return "tmpfs";
    case 0x9123683E: return "btrfs";
    case 0x794C7630: return "overlayfs";
    case 0xFF534D42: return "cifs";
    case 0xFE534D42: return "smb2";
    case 0x65735546: return "fuse";
    case 0x0BD00BD0: return "lustre";
    case 0x47504653: return "gpfs";
    case 0x2FC12FC1: return "zfs";
    default: return fmt::format("0x{:x}", uint32_t(magic));
  }
}

CheckResult check_save_dir(const std::string& path, int64_t free_bytes, int64_t fs_magic, int64_t need_bytes) {
  CheckResult r{"save-dir", Status::kPass, "", ""};
  const std::string fs = fs_name(fs_magic);
  r.finding = fmt::format("{}: {} free on {}", path, gib(double(free_bytes)), fs);
  if (fs == "nfs" || fs == "cifs" || fs == "smb2") {
    r.status = Status::kWarn;
    r.fix = "save to a local NVMe disk (--save /local/...) and copy finished checkpoints to " + fs +
            " afterwards; network file systems make every save slow and can stall training";
  }
  const double need = need_bytes > 0 ? double(need_bytes) : 10.0 * kGiB;
  if (double(free_bytes) < need) {
    r.status = Status::kWarn;
    r.finding += fmt::format("; need about {}{}", gib(need),
                             need_bytes > 0 ? " (2 checkpoints: the last good one stays until the new one commits)"
                                            : "");
    r.fix = (r.fix.empty() ? "" : r.fix + "; ") + "free space or point --save at a larger disk";
  }
  return r;
}

}  // namespace tripod::doctor
