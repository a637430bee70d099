// GPU checks: devices, driver vs runtime CUDA version, NCCL version (through
// the CUDA runtime and NCCL APIs, linked; CPU builds report that they have no
// GPU support), the cuDNN the backend would open (dlopen, as the backend
// does), and the topology `nvidia-smi topo -m` prints. See doctor/checks.h.
#include <algorithm>
#include <sstream>

#if TRIPOD_WITH_CUDA
#include <dlfcn.h>
#include <link.h>
#endif

#include <fmt/format.h>

#include "doctor/checks.h"

#if TRIPOD_WITH_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace tripod::doctor {

std::string cuda_version_str(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

std::string nccl_version_str(int v) {
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch; older major*1000 + minor*100 + patch.
  if (v >= 10000) return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
  return fmt::format("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100);
}

CudaInventory gather_cuda_inventory() {
  CudaInventory inv;
#if TRIPOD_WITH_CUDA
  inv.built_with_cuda = true;
  cudaRuntimeGetVersion(&inv.runtime_version);
  if (cudaDriverGetVersion(&inv.driver_version) != cudaSuccess) inv.driver_version = 0;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    inv.error = cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky error for later callers
    n = 0;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    inv.gpus.push_back({p.name, int64_t(p.totalGlobalMem), p.major, p.minor});
  }
  ncclGetVersion(&inv.nccl_version);
  // The names the backend opens, in its order (backend/cuda/cudnn_graph.cpp),
  // so the search path picks the same library.
  void* h = nullptr;
  for (const char* name : {"libcudnn.so.9", "libcudnn_graph.so.9"})
    if ((h = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
  if (h) {
    using GetVersion = size_t (*)();
    if (auto* get = reinterpret_cast<GetVersion>(dlsym(h, "cudnnGetVersion"))) inv.cudnn_version = int(get());
    char origin[4096] = {0};
    if (dlinfo(h, RTLD_DI_ORIGIN, origin) == 0) inv.cudnn_dir = origin;
    dlclose(h);
  }
#endif
  return inv;
}

std::string cudnn_version_str(int v) {
  return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
}

CheckResult check_cudnn_version(const CudaInventory& inv) {
  CheckResult r{"cudnn-version", Status::kPass, "", ""};
  const std::string newer =
      "put a newer libcudnn.so.9 first on LD_LIBRARY_PATH (a cuDNN 9 install, or PyTorch's wheel's "
      "site-packages/nvidia/cudnn/lib)";
  if (!inv.built_with_cuda) {
    r.status = Status::kInfo;
    r.finding = "CPU build: cuDNN not used";
    return r;
  }
  if (inv.cudnn_version == 0) {
    r.status = Status::kInfo;
    r.finding = "no libcudnn.so.9 found: attention runs on tripod's own kernels (slower than cuDNN's flash "
                "attention); --fp8-dot-product-attention is not available";
    r.fix = "install cuDNN 9, or " + newer;
    return r;
  }
  const std::string where = inv.cudnn_dir.empty() ? "" : " from " + inv.cudnn_dir;
  if (inv.cudnn_version / 10000 != 9) {
    r.status = Status::kWarn;
    r.finding = fmt::format("cuDNN {}{}: tripod takes cuDNN 9; attention runs on its own kernels",
                            cudnn_version_str(inv.cudnn_version), where);
    r.fix = newer;
    return r;
  }
  if (inv.cudnn_version < 91900) {
    r.status = Status::kInfo;
    r.finding = fmt::format("cuDNN {}{}: flash attention; --fp8-dot-product-attention needs 9.19 or later",
                            cudnn_version_str(inv.cudnn_version), where);
    r.fix = "for FP8 attention, " + newer;
    return r;
  }
  r.finding = fmt::format("cuDNN {}{}: flash attention and FP8 attention (--fp8-dot-product-attention)",
                          cudnn_version_str(inv.cudnn_version), where);
  return r;
}

CheckResult check_gpus(const CudaInventory& inv) {
  CheckResult r{"gpus", Status::kPass, "", ""};
  if (!inv.built_with_cuda) {
    r.status = Status::kInfo;
    r.finding = "no GPU: CPU backend only (this tripod was built without CUDA)";
    r.fix = "for GPUs, build with the CUDA toolkit installed (scripts/setup.sh, TRIPOD_CUDA=AUTO)";
    return r;
  }
  if (inv.gpus.empty() && inv.driver_version == 0) {
    // The CUDA runtime says "CUDA driver version is insufficient" when there
    // is no driver at all: say what it means.
    r.status = Status::kInfo;
    r.finding = "no NVIDIA driver on this machine: no GPU, CPU backend only";
    r.fix = "if this machine has GPUs: install the NVIDIA driver (`nvidia-smi` should list them); in a container "
            "pass --gpus all with the NVIDIA container toolkit";
    return r;
  }
  if (inv.gpus.empty()) {
    r.status = Status::kInfo;
    r.finding = fmt::format("no GPU: CPU backend only{}", inv.error.empty() ? "" : " (" + inv.error + ")");
    r.fix = "if this machine has GPUs: check `nvidia-smi`, the driver, and CUDA_VISIBLE_DEVICES; in a container "
            "pass --gpus all";
    return r;
  }
  std::map<std::string, int> by_name;
  for (const auto& g : inv.gpus)
    by_name[fmt::format("{} ({:.0f} GiB, sm_{}{})", g.name, double(g.memory_bytes) / double(1ll << 30), g.major,
                        g.minor)]++;
  r.finding = fmt::format("{} GPU{}:", inv.gpus.size(), inv.gpus.size() > 1 ? "s" : "");
  for (const auto& [name, count] : by_name) r.finding += fmt::format(" {} x {}", count, name);
  if (by_name.size() > 1) {
    r.status = Status::kWarn;
    r.fix = "mixed GPU models: the slowest sets the pace of every collective; use one model per job";
  }
  return r;
}

CheckResult check_cuda_versions(const CudaInventory& inv) {
  CheckResult r{"cuda-version", Status::kPass, "", ""};
  if (!inv.built_with_cuda) {
    r.status = Status::kInfo;
    r.finding = "CPU build: no CUDA runtime";
    return r;
  }
  if (inv.driver_version == 0) {
    r.status = inv.gpus.empty() ? Status::kInfo : Status::kFail;
    r.finding = fmt::format("no NVIDIA driver found (runtime CUDA {})", cuda_version_str(inv.runtime_version));
    r.fix = "install the NVIDIA driver (in containers: run with --gpus all and the NVIDIA container toolkit)";
    return r;
  }
  r.finding = fmt::format("driver supports CUDA {}, tripod built with runtime {}",
                          cuda_version_str(inv.driver_version), cuda_version_str(inv.runtime_version));
  if (inv.driver_version < inv.runtime_version) {
    r.status = Status::kFail;
    r.finding += ": the driver is older than the runtime";
    r.fix = fmt::format("upgrade the driver to one that supports CUDA {} (or build with CUDA <= {}; a container "
                        "image whose CUDA matches the host driver)",
                        cuda_version_str(inv.runtime_version), cuda_version_str(inv.driver_version));
  }
  return r;
}

CheckResult check_nccl_version(const CudaInventory& inv) {
  CheckResult r{"nccl-version", Status::kPass, "", ""};
  if (inv.nccl_version == 0) {
    r.status = Status::kInfo;
    r.finding = "not built with NCCL (CPU collectives: Gloo)";
    return r;
  }
  r.finding = "NCCL " + nccl_version_str(inv.nccl_version);
  return r;
}

bool is_nvlink(const std::string& link) {
  return link.size() > 2 && link.rfind("NV", 0) == 0 &&
         std::all_of(link.begin() + 2, link.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// nvidia-smi underlines the header with ANSI escapes even into a pipe
// ("\x1b[4mGPU0\tCPU Affinity...\x1b[0m"): drop CSI sequences first.
static std::string strip_ansi(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\x1b' && i + 1 < s.size() && s[i + 1] == '[') {
      i += 2;
      while (i < s.size() && !(s[i] >= '@' && s[i] <= '~')) ++i;  // up to the final byte
      continue;
    }
    out += s[i];
  }
  return out;
}

std::optional<Topology> parse_topology(const std::string& raw) {
  const std::string text = strip_ansi(raw);
  std::istringstream in(text);
  std::string line;
  int n = -1;
  Topology t;
  auto is_gpu = [](const std::string& tok) {
    return tok.size() > 3 && tok.rfind("GPU", 0) == 0 &&
           std::all_of(tok.begin() + 3, tok.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::vector<std::string> tok;
    for (std::string s; f >> s;) tok.push_back(s);
    if (tok.empty()) continue;
    if (n < 0) {  // header: GPU0 GPU1 ... NIC0 CPU Affinity ...
      if (!is_gpu(tok[0]) || tok[0] != "GPU0") continue;
      n = 0;
      while (n < int(tok.size()) && is_gpu(tok[n])) ++n;
      t.num_gpus = n;
      continue;
    }
    if (!is_gpu(tok[0])) {
      if (int(t.link.size()) == n) break;
      continue;
    }
    if (int(tok.size()) < n + 1) return std::nullopt;
    t.link.emplace_back(tok.begin() + 1, tok.begin() + 1 + n);
    if (int(t.link.size()) == n) break;
  }
  if (n <= 0 || int(t.link.size()) != n) return std::nullopt;
  return t;
}

CheckResult check_topology(const std::optional<std::string>& topo_text, int tp) {
  CheckResult r{"gpu-topology", Status::kPass, "", ""};
  if (!topo_text) {
    r.status = Status::kInfo;
    r.finding = "nvidia-smi not found: GPU topology not checked";
    return r;
  }
  const auto t = parse_topology(*topo_text);
  if (!t) {
    r.status = Status::kWarn;
    r.finding = "could not parse `nvidia-smi topo -m`";
    r.fix = "run `nvidia-smi topo -m` yourself: NV# between GPUs is NVLink; PIX/PXB/PHB/NODE/SYS is PCIe";
    return r;
  }
  std::vector<std::string> pcie;
  for (int i = 0; i < t->num_gpus; ++i)
    for (int j = i + 1; j < t->num_gpus; ++j)
      if (!is_nvlink(t->link[i][j])) pcie.push_back(fmt::format("GPU{}-GPU{} {}", i, j, t->link[i][j]));
  if (t->num_gpus == 1) {
    r.finding = "1 GPU: no GPU-to-GPU links (TP > 1 needs more GPUs or crosses nodes)";
  } else if (pcie.empty()) {
    r.finding = fmt::format("{} GPUs, every pair on NVLink ({})", t->num_gpus, t->link[0][1]);
  } else {
    r.status = Status::kWarn;
    std::string first;
    for (size_t k = 0; k < std::min<size_t>(pcie.size(), 4); ++k) first += (k ? ", " : "") + pcie[k];
    r.finding = fmt::format("{} GPUs, {} pair{} over PCIe, not NVLink ({}{})", t->num_gpus, pcie.size(),
                            pcie.size() > 1 ? "s" : "", first, pcie.size() > 4 ? ", ..." : "");
    r.fix = "keep TP groups on NVLink-connected GPUs (smaller --tensor-model-parallel-size; more PP/DP instead)";
  }
  if (tp > 0) {
    if (tp > t->num_gpus) {
      r.status = Status::kWarn;
      r.finding += fmt::format("; TP {} is larger than the {} GPUs of this node: TP would cross nodes", tp,
                               t->num_gpus);
      r.fix = fmt::format("use --tensor-model-parallel-size <= {} (see `tripod plan`)", t->num_gpus);
      return r;
    }
    int crossing = 0;
    for (int g = 0; g + tp <= t->num_gpus; g += tp)
      for (int i = g; i < g + tp; ++i)
        for (int j = i + 1; j < g + tp; ++j) crossing += !is_nvlink(t->link[i][j]);
    if (crossing > 0) {
      r.status = Status::kWarn;
      r.finding += fmt::format("; TP {} groups would cross PCIe ({} pair{})", tp, crossing, crossing > 1 ? "s" : "");
      r.fix = "choose a --tensor-model-parallel-size whose groups stay on NVLink (see `tripod plan`)";
    } else if (!pcie.empty()) {
      r.status = Status::kPass;
      r.finding += fmt::format("; TP {} groups stay on NVLink", tp);
      r.fix.clear();
    }
  }
  return r;
}

}  // namespace tripod::doctor
