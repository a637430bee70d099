// Reads this machine (files under /proc and /sys, statfs, getifaddrs, the
// CUDA runtime, `nvidia-smi topo -m`) and runs every check of
// doctor/checks.h that needs no communicator.
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "doctor/checks.h"

extern char** environ;

namespace tripod::doctor {
namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

EnvMap process_env() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

bool on_path(const std::string& tool) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  for (std::string dir; std::getline(ss, dir, ':');)
    if (!dir.empty() && ::access((fs::path(dir) / tool).c_str(), X_OK) == 0) return true;
  return false;
}

std::optional<std::string> run_tool(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return std::nullopt;
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int rc = ::pclose(p);
  if (rc != 0) return std::nullopt;
  return out;
}

// The directory itself or its nearest existing parent (--save may not exist yet).
fs::path existing_dir(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path.empty() ? "." : path, ec).lexically_normal();
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();
  return p.empty() ? fs::path("/") : p;
}

}  // namespace

std::vector<CheckResult> run_local_checks(const DoctorOptions& o) {
  std::vector<CheckResult> out;
  const EnvMap env = process_env();
  out.push_back(check_host_ram(read_text("/proc/meminfo"), o.model_params));

  const bool container = detect_container(read_text("/proc/1/cgroup"), fs::exists("/.dockerenv"),
                                          fs::exists("/run/.containerenv"), env);
  std::optional<int64_t> shm;
  struct statvfs sv{};
  if (::statvfs("/dev/shm", &sv) == 0) shm = int64_t(sv.f_blocks) * int64_t(sv.f_frsize);
  out.push_back(check_shm(shm, container));

  const fs::path save = existing_dir(o.save_dir);
  struct statfs sf{};
  if (::statfs(save.c_str(), &sf) == 0) {
    // Two checkpoints (fp32 weights + Adam m and v: 12 B/param) must fit.
    const int64_t need = o.model_params > 0 ? 2 * 12 * o.model_params : 0;
    out.push_back(check_save_dir(save.string(), int64_t(sf.f_bavail) * int64_t(sf.f_bsize), int64_t(sf.f_type),
                                 need));
  } else {
    out.push_back({"save-dir", Status::kWarn, "cannot statfs " + save.string(), "check --save"});
  }

  out.push_back(check_master_addr(env));
  out.push_back(check_master_reachable(env, o.connect_timeout_ms));
  out.push_back(check_socket_ifname(env, list_interfaces()));
  std::error_code ec;
  const bool ib = fs::exists("/sys/class/infiniband", ec) && !fs::is_empty("/sys/class/infiniband", ec);
  out.push_back(check_ib_disable(env, ib));
  out.push_back(check_nccl_debug(env));

  const CudaInventory inv = gather_cuda_inventory();
  out.push_back(check_gpus(inv));
  out.push_back(check_cuda_versions(inv));
  out.push_back(check_nccl_version(inv));
  out.push_back(check_cudnn_version(inv));
  std::optional<std::string> topo;
  if (on_path("nvidia-smi")) topo = run_tool("nvidia-smi topo -m 2>/dev/null");
  out.push_back(check_topology(topo, o.tp));
  return out;
}

}  // namespace tripod::doctor
